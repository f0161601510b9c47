"""The whole test suite as ``make test`` runs it, ending with a table of every part's result and time.

First the unit and simulator tests (``-m 'not spark'``) in one pytest process, then each real-Spark
file in a pytest process of its own: pyspark launches one driver JVM per Python process, with the
first session's settings as JVM system properties, and every later SparkConf in that process would
read them as defaults. A file that fails does not stop the ones after it (the table shows them all);
the exit status is 0 only when every part passed.

    python tests/run_suite.py                      # unit tests, then every tests/integration/test_*.py
    python tests/run_suite.py tests/integration/test_kafka.py ...   # only these files (no unit tests)
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INTEGRATION = REPO / "tests" / "integration"
# A file that hangs must not hold the machine (and CI) forever: no file takes near this today.
FILE_TIMEOUT_S = 1500.0
_SUMMARY = re.compile(r"^=+ (.*\d.*) in [\d.]+s(?: \(.*\))? =+$")


@dataclass
class Part:
    name: str
    result: str
    seconds: float
    load: str

    @property
    def ok(self) -> bool:
        return self.result.startswith("passed")


def load_average() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def run_pytest(name: str, args: list[str]) -> Part:
    """One pytest process in a process group of its own, its output passed through as it comes;
    its result and wall time. Whatever it leaves running when it ends (a JVM that outlived its
    test) is killed with the group, so that it cannot slow down the files after it."""
    load = load_average()
    print(f"\n== {name} (load average {load})", flush=True)
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    summary: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            match = _SUMMARY.match(line.strip())
            if match:
                summary.append(match.group(1))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        process.wait(FILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        timed_out = True
    except KeyboardInterrupt:
        _kill_group(process.pid)
        raise
    leftovers = [pid for pid in _group_members(process.pid) if pid != process.pid]
    if leftovers and not timed_out:
        print(f"run_suite: {name} left {len(leftovers)} process(es) running; killed: {leftovers}", flush=True)
    _kill_group(process.pid)
    code = process.wait()
    reader.join(30)
    seconds = time.monotonic() - started
    if timed_out:
        result = f"TIMEOUT after {FILE_TIMEOUT_S:.0f}s"
    elif code == 0:
        result = f"passed ({summary[-1]})" if summary else "passed"
    else:
        result = f"FAILED ({summary[-1] if summary else f'exit {code}'})"
    return Part(name, result, seconds, load)


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    members.append(int(entry.name))
            except ProcessLookupError:
                continue
    return members


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # nothing of it left


def table(parts: list[Part]) -> str:
    width = max(len(p.name) for p in parts)
    lines = [f"{'part':<{width}}  {'seconds':>7}  {'load':>5}  result"]
    lines += [f"{p.name:<{width}}  {p.seconds:7.0f}  {p.load:>5}  {p.result}" for p in parts]
    total = sum(p.seconds for p in parts)
    lines.append(f"{'total':<{width}}  {total:7.0f}         "
                 f"{sum(p.ok for p in parts)} of {len(parts)} passed ({total / 60:.1f} min)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="real-Spark files to run (default: all, "
                        "after the unit tests)")
    args = parser.parse_args(argv)
    parts = []
    if args.files:
        files = [f.resolve() for f in args.files]
    else:
        parts.append(run_pytest("unit and simulator", ["tests", "-m", "not spark"]))
        files = sorted(INTEGRATION.glob("test_*.py"))
    for path in files:
        parts.append(run_pytest(path.name, [str(path.relative_to(REPO))]))
    print("\n" + table(parts), flush=True)
    return 0 if all(p.ok for p in parts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
