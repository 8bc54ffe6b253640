from benchmarks import main

raise SystemExit(main())
