"""``python -m server.cli``: the ``tikk`` command."""

from server.cli import main

raise SystemExit(main())
