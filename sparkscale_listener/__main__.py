"""``python -m sparkscale_listener COMMAND``: the package's commands (``replay``: what sparkscale
would have done on a job that already ran, from its event log; ``agent``: the autoscaler beside a
driver, started by the driver plugin with ``spark.sparkscale.launch=agent``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .replay import cli as replay
from .spark import agent


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparkscale_listener")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    replay.add_parser(subparsers)
    agent.add_parser(subparsers)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
