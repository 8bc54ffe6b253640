"""``python -m cowconv``: the cowconv command line."""

from cowconv._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
