"""``python -m sparkscale_listener COMMAND``: the package's commands (``replay``: what sparkscale
would have done on a job that already ran, from its event log)."""

from __future__ import annotations

import sys

from .replay.cli import main

if __name__ == "__main__":
    sys.exit(main())
