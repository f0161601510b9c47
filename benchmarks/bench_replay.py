"""How fast a recorded application is replayed: a 1-hour event log of a 2 s trigger query.

The log is the real sparkscale run (``tests/data/eventlogs/spark4-sparkscale-rolling``: the 2 s
trigger query ``orders``, a 10 s rate query, a batch job, sparkscale's own events), tiled to span an
hour as :mod:`bench_eventlog` tiles it (every event kept, times and ids shifted), written as Spark
writes it (zstd). The replay reads it and runs the real autoscaler over it with the recorded
settings, as ``python -m sparkscale_listener replay LOG`` does (the PNG left out: matplotlib is not
what is measured). Target: under 30 s. A benchmark, not a test: run it through the heavy-run lock::

    /work/shared/tools/serial .venv/bin/python benchmarks/bench_replay.py [--hours 1]

It prints the time of each part against the target with the load average, and writes them to
``benchmarks/results/replay.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_eventlog import SOURCE, source_lines, stretch, write_logs  # noqa: E402
from sparkscale_listener.replay import read_event_log  # noqa: E402
from sparkscale_listener.replay.report import markdown, to_json  # noqa: E402
from sparkscale_listener.replay.run import compare  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "replay.md"
TARGET_S = 30.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--no-results", action="store_true", help="print only")
    args = parser.parse_args()
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        _, packed = write_logs(stretch(source_lines(SOURCE), args.hours), Path(tmp))
        size = packed.stat().st_size
        started = time.perf_counter()
        app = read_event_log(packed)
        read_s = time.perf_counter() - started
        comparison = compare(app)
        replay_s = time.perf_counter() - started - read_s
        markdown(comparison)
        to_json(comparison)
        total_s = time.perf_counter() - started
    load_end = os.getloadavg()
    run = comparison.runs[0]
    orders = max(comparison.history.queries, key=lambda q: len(q.batches))
    span_h = (comparison.history.end - comparison.history.start) / 3600
    verdict = "within" if total_s < TARGET_S else "OVER"
    lines = [
        f"{packed.name}: {size / 1e6:.1f} MB (zstd), {span_h:.2f} h; query {orders.label!r}: "
        f"{len(orders.batches)} batches, trigger {orders.trigger_s:g} s",
        f"replayed in {total_s:.1f} s ({verdict} the {TARGET_S:g} s target): read {read_s:.2f} s, history, "
        f"simulation and the autoscaler's {len(run.series.t)} ticks {replay_s:.1f} s, report "
        f"{total_s - read_s - replay_s:.2f} s",
        f"recorded: {len(comparison.actual.actions)} actions, {comparison.actual.executor_seconds:.0f} "
        f"executor-s; replayed with its settings: {len(run.actions)} actions, {run.executor_seconds:.0f} "
        f"executor-s",
        f"load average: {' '.join(f'{x:.2f}' for x in load_start)} at the start, "
        f"{' '.join(f'{x:.2f}' for x in load_end)} at the end (2 cores)"]
    print("\n".join(lines))
    if not args.no_results:
        command = "benchmarks/bench_replay.py" + (f" --hours {args.hours:g}" if args.hours != 1.0 else "")
        RESULTS.write_text(f"# Replaying an event log\n\n`{command}`: {args.hours:g} h tiled from "
                           f"`{SOURCE.name}`, read and replayed with the recorded settings "
                           "(`read_event_log`, `compare`, the markdown and JSON reports).\n\n```\n"
                           + "\n".join(lines) + "\n```\n")
    return 0 if total_s < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
