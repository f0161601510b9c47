"""``python -m sparkscale_listener replay``: what sparkscale would have done on a job that already ran.

Reads the job's event log, replays it with the recorded settings (or ``--conf`` ones) and each
``--compare`` setting, prints a markdown summary; ``--out DIR`` also writes it with a JSON file and
a PNG. Mistakes (a file that is no event log, a bad key or value) end with one line naming them
and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ..config.core import misspelt_prefix_keys
from ..config.options import PREFIX, ConfigError
from .eventlog import read_event_log
from .records import EventLogError
from .report import PlotUnavailable, markdown, write
from .run import compare

USAGE_ERROR = 2
PROGRESS_AFTER_S = 2.0  # a log read faster than this shows no progress bar


class UsageError(Exception):
    """A command-line argument that cannot be used, with what is accepted."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "replay", help="replay a recorded application's event log with any settings",
        description="Replay a Spark application's event log (a file or a rolling-log folder, plain or "
        "compressed) through sparkscale's own decision code: what it would have done with the recorded "
        "settings, --conf ones, and each --compare setting, beside what the job actually did.")
    p.add_argument("event_log", metavar="EVENT_LOG", type=Path)
    p.add_argument("--conf", metavar="KEY=VALUE", nargs="+", action="extend", default=[],
                   help="a setting over the recorded ones, one per argument (repeatable); the prefix "
                   "spark.sparkscale. may be left out")
    p.add_argument("--compare", metavar="KEY=VALUE", nargs="+", action="extend", default=[],
                   help="another setting to replay beside them, one per argument (several keys in one "
                   "argument: separated by spaces); the prefix spark.sparkscale. may be left out")
    p.add_argument("--out", metavar="DIR", type=Path, help="write replay.md, replay.json and replay.png here")
    p.add_argument("--provisioning-time", metavar="SECONDS", type=float,
                   help="request -> registered time of the simulated executors (default: as the log "
                   "shows it, else provisioningTime)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        base = parse_settings(args.conf, "--conf")
        variants = [parse_settings(arg.split(), "--compare") for arg in args.compare]
        if args.provisioning_time is not None and args.provisioning_time < 0:
            raise UsageError(f"--provisioning-time {args.provisioning_time:g}: expected seconds >= 0")
        app = read_event_log(args.event_log, progress=ProgressBar(err, str(args.event_log)))
        comparison = compare(app, variants, base, provisioning_s=args.provisioning_time)
    except (EventLogError, ConfigError, UsageError) as e:
        print(f"error: {e}", file=err)
        return USAGE_ERROR
    except ValueError as e:  # a log without any streaming batch
        print(f"error: {e}", file=err)
        return USAGE_ERROR
    out.write(markdown(comparison))
    if args.out is None:
        print("\n(--out DIR writes this with a JSON file and a PNG)", file=err)
        return 0
    try:
        paths = write(comparison, args.out)
    except PlotUnavailable as e:
        paths = write(comparison, args.out, plot_png=False)
        print(f"note: no PNG: {e}", file=err)
    except OSError as e:
        print(f"error: cannot write to {args.out}: {e}", file=err)
        return USAGE_ERROR
    print("wrote " + ", ".join(str(p) for p in paths), file=err)
    return 0


def parse_settings(items: Sequence[str], flag: str) -> dict[str, str]:
    """``KEY=VALUE`` arguments as ``spark.sparkscale.*`` settings: the prefix may be left out, and a
    key of another Spark namespace is refused (only sparkscale's settings are replayed)."""
    settings: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"{flag} {item!r}: expected KEY=VALUE (for example scaleDownInterval=60s)")
        if not key.startswith(PREFIX) and key.startswith("spark."):
            meant = misspelt_prefix_keys({key: value}).get(key)
            hint = f"; did you mean {meant}?" if meant else (
                f"; only {PREFIX}* settings are replayed (executors' size and limits come from the log)")
            raise UsageError(f"{flag} {key}={value!r} is not a sparkscale setting{hint}")
        settings[key if key.startswith(PREFIX) else PREFIX + key] = value
    return settings


class ProgressBar:
    """A progress bar on ``stream`` for :func:`read_event_log`, shown only on a terminal and only
    once reading has taken :data:`PROGRESS_AFTER_S`."""

    def __init__(self, stream: TextIO, label: str, width: int = 30) -> None:
        self.stream, self.label, self.width = stream, label, width
        self.started = time.monotonic()
        self.shown = False
        self.tty = bool(getattr(stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        if not self.tty or time.monotonic() - self.started < PROGRESS_AFTER_S:
            return
        share = done / total if total > 0 else 1.0
        bar = "#" * round(share * self.width)
        self.stream.write(f"\rreading {self.label} [{bar:<{self.width}}] {share:4.0%} "
                          f"({done / 1e6:.1f} of {total / 1e6:.1f} MB)")
        self.shown = True
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
