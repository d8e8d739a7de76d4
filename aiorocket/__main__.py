"""``python -m aiorocket``: the command-line interface."""

from aiorocket.cli import main

raise SystemExit(main())
