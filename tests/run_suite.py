"""The whole test suite as ``make test`` runs it, ending with a table of every part's result and time.

First the unit and simulator tests (``-m 'not spark'``) in one pytest process, then each real-Spark
file in a pytest process of its own: pyspark launches one driver JVM per Python process, with the
first session's settings as JVM system properties, and every later SparkConf in that process would
read them as defaults. A file that fails does not stop the ones after it (the table shows them all);
the exit status is 0 only when every part passed.

    python tests/run_suite.py                      # unit tests, then every tests/integration/test_*.py
    python tests/run_suite.py tests/integration/test_kafka.py ...   # only these files (no unit tests)
    python tests/run_suite.py --jobs 2             # two real-Spark files at a time (SUITE_JOBS=2)

With ``--jobs 2`` two files run side by side, the longest first; each file's output is printed
whole when it ends. Most of a real-Spark test is waiting for the autoscaler's next decision (the
test source's per-row work sleeps), so two at a time take little more than the longer of the two.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
INTEGRATION = REPO / "tests" / "integration"
# A file that hangs must not hold the machine (and CI) forever: no file takes near this today.
FILE_TIMEOUT_S = 1500.0
_SUMMARY = re.compile(r"^=+ (.*\d.*) in [\d.]+s(?: \(.*\))? =+$")
# With --jobs > 1, these files start first (the longest, as last measured): a long file started
# last would run alone at the end.
LONGEST_FIRST = ("test_autoscaler_spark.py", "test_kafka.py", "test_rollback_spark.py", "test_yarn.py",
                 "test_faults_cluster.py", "test_spark_versions.py", "test_spark_submit.py")
_print_lock = threading.Lock()


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


def run_pytest(name: str, args: list[str], live: bool = True) -> Part:
    """One pytest process in a process group of its own; its result and wall time. Its output is
    passed through as it comes (``live``), else printed whole when it ends. Whatever it leaves
    running when it ends (a JVM that outlived its test) is killed with the group, so that it cannot
    slow down the files after it."""
    load = load_average()
    header = f"\n== {name} (load average {load})"
    if live:
        print(header, flush=True)
    else:
        with _print_lock:
            print(f"run_suite: {name} started (load average {load})", flush=True)
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "pytest", *args], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    summary: list[str] = []
    buffered: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if live:
                sys.stdout.write(line)
                sys.stdout.flush()
            else:
                buffered.append(line)
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
    with _print_lock:
        if not live:
            print(header + f", {seconds:.0f} s", flush=True)
            sys.stdout.write("".join(buffered))
        if leftovers and not timed_out:
            print(f"run_suite: {name} left {len(leftovers)} process(es) running; killed: {leftovers}")
        sys.stdout.flush()
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


def table(parts: list[Part], wall_s: float) -> str:
    width = max(len(p.name) for p in parts)
    lines = [f"{'part':<{width}}  {'seconds':>7}  {'load':>5}  result"]
    lines += [f"{p.name:<{width}}  {p.seconds:7.0f}  {p.load:>5}  {p.result}" for p in parts]
    lines.append(f"{'total':<{width}}  {wall_s:7.0f}         "
                 f"{sum(p.ok for p in parts)} of {len(parts)} passed ({wall_s / 60:.1f} min)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="real-Spark files to run (default: all, "
                        "after the unit tests)")
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("SUITE_JOBS", "1")),
                        help="real-Spark files run at a time (default: $SUITE_JOBS or 1)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    parts = []
    if args.files:
        files = [f.resolve() for f in args.files]
    else:
        # Pure Python, no Spark: one worker per core (pytest-xdist; 36 s instead of 60 s on 2 cores).
        parts.append(run_pytest("unit and simulator", ["tests", "-m", "not spark", "-n", "auto"]))
        files = sorted(INTEGRATION.glob("test_*.py"))
    basetemp = Path(tempfile.mkdtemp(prefix="run_suite-"))

    def run(path: Path) -> Part:
        # A base temp dir of each file's own: pytest's numbered ones are pruned by the next session.
        # --durations: each test's own time in the log, so the next cut of the suite knows where to look.
        return run_pytest(path.name, [str(path.relative_to(REPO)), f"--basetemp={basetemp / path.stem}",
                                      "--durations=0", "--durations-min=5"], live=args.jobs <= 1)

    if args.jobs <= 1:
        parts += [run(path) for path in files]
    else:
        order = sorted(files, key=lambda f: LONGEST_FIRST.index(f.name) if f.name in LONGEST_FIRST
                       else len(LONGEST_FIRST))
        with ThreadPoolExecutor(args.jobs) as pool:
            done = dict(zip(order, pool.map(run, order), strict=True))
        parts += [done[path] for path in files]
    shutil.rmtree(basetemp, ignore_errors=True)
    print("\n" + table(parts, time.monotonic() - started), flush=True)
    return 0 if all(p.ok for p in parts) else 1


if __name__ == "__main__":
    raise SystemExit(main())
