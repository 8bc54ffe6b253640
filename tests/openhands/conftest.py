"""Keep the ported copies out of cowconv's own test run.

``tests/openhands/ported/`` holds OpenHands' tests written by ``port.py``; they
run in their own pytest session (``python tests/openhands/port.py run``), with
their own configuration, not as part of ``pytest tests``.
"""

collect_ignore = ["ported"]
