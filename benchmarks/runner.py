"""What the real-Spark benchmarks (``bench_real_spark.py``, ``bench_kafka_step.py``) share: running
one application per policy in a process of its own with a deadline, the environment and ports it
gets, each policy's Spark settings, the machine's load average beside each run, reading an event
log and a query's progress, the median and range per policy, and writing a report with its JSON.

Each benchmark keeps what is its own: its load, its job and its figures.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sparkscale_listener.collect.backlog import parse_offset

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
VENV_BIN = Path(sys.executable).parent


# ------------------------------------------------------------------------------ processes
class Processes:
    """Every process a benchmark starts (each in its own session), stopped on any exit."""

    def __init__(self) -> None:
        self.running: list[subprocess.Popen[bytes]] = []
        atexit.register(self.stop_all)

    def start(self, args: Sequence[str], log: Path, env: Mapping[str, str], cwd: Path | None = None
              ) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            process = subprocess.Popen(list(args), env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                                       cwd=cwd, start_new_session=True)
        self.running.append(process)
        return process

    def stop(self, process: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
        """Stop ``process`` and its whole process group (a driver's JVM is the Python driver's
        child, a Worker's executors the Worker's, a Kafka run's broker the run's): TERM, then KILL
        for whatever is left."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except (ProcessLookupError, PermissionError):
                break  # the group is gone
            try:
                process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            if sig == signal.SIGTERM:
                time.sleep(1.0)  # children stop after their leader
        if process in self.running:
            self.running.remove(process)

    def stop_all(self) -> None:
        for process in reversed(list(self.running)):
            self.stop(process)


def stop_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that ``finally`` blocks and :class:`Processes` stop every
    process the benchmark started (a killed benchmark would leave its Workers or broker behind)."""

    def on_signal(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_env() -> dict[str, str]:
    """The environment of a benchmark's Spark processes: loopback only, this interpreter for the
    driver and the executors, and no PYTHONPATH (the executors import the installed package)."""
    import pyspark

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOCAL_IP="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return env


RESULT_FILE = "result.json"  # what a run's process leaves in its work folder


def run_application(procs: Processes, command: Sequence[str], work: Path, env: Mapping[str, str],
                    deadline_s: float, name: str) -> dict[str, Any]:
    """Run one application's process (``command``, its output in ``work/driver.log``) for at most
    ``deadline_s``; it writes its result to ``work/result.json``. That result, with ``wall_s``.
    A process of its own per run: no JVM, executor or Python worker outlives its run into the next."""
    started = time.monotonic()
    process = procs.start(command, work / "driver.log", env, cwd=work)
    try:
        process.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        code = process.poll()
        procs.stop(process)
    if code != 0 or not (work / RESULT_FILE).exists():
        tail = (work / "driver.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{name}: exit {code} after {time.monotonic() - started:.0f}s\n{tail}")
    result: dict[str, Any] = json.loads((work / RESULT_FILE).read_text())
    result["wall_s"] = time.monotonic() - started
    return result


def rotated(policies: Sequence[str], round_number: int) -> list[str]:
    """The policies in round ``round_number`` (from 1), their order rotated each round: no policy
    always runs first, on the machine the previous run just left."""
    shift = (round_number - 1) % len(policies)
    return [*policies[shift:], *policies[:shift]]


# ---------------------------------------------------------------------------- load average
def load_average() -> str:
    """The machine's 1-, 5- and 15-minute load averages: beside each run, since a figure from a
    busy machine is noise."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def settle(quiet_load: float, longest_s: float = 180.0) -> float:
    """Wait until the 1-minute load average is at most ``quiet_load`` (the run before's executors,
    driver and event log gone), at most ``longest_s``; the load average then. A run started at load
    10 right after the previous one learned its first cost from batches several times slower than
    the rest of its run."""
    deadline = time.monotonic() + longest_s
    while os.getloadavg()[0] > quiet_load and time.monotonic() < deadline:
        time.sleep(5.0)
    return os.getloadavg()[0]


# ------------------------------------------------------------------------ policies' settings
def sparkscale_conf(max_executors: int, initial_executors: int,
                    settings: Mapping[str, str] | None = None) -> dict[str, str]:
    """sparkscale's keys: ``settings`` (without the ``spark.sparkscale.`` prefix) and its bounds."""
    conf = {f"spark.sparkscale.{key}": value for key, value in (settings or {}).items()}
    conf.update({"spark.sparkscale.initialExecutors": str(initial_executors),
                 "spark.sparkscale.maxExecutors": str(max_executors)})
    return conf


def dynamic_allocation_conf(max_executors: int, initial_executors: int,
                            idle_timeout: str | None = None) -> dict[str, str]:
    """Spark's own dynamic allocation within the same bounds as sparkscale, its other settings
    their defaults; shuffle tracking, since neither cluster runs an external shuffle service."""
    conf = {"spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "true",
            "spark.dynamicAllocation.minExecutors": "1",
            "spark.dynamicAllocation.initialExecutors": str(initial_executors),
            "spark.dynamicAllocation.maxExecutors": str(max_executors)}
    if idle_timeout is not None:
        conf["spark.dynamicAllocation.executorIdleTimeout"] = idle_timeout
    return conf


# -------------------------------------------------------------- event logs and query progress
def read_event_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The events of an uncompressed event log: a file, or a rolling log's folder."""
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    for file in files:
        with open(file, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield json.loads(line)


# A source offset as a query's progress gives it (an object, or its JSON text; None when the text is
# not JSON) -> the object: read as sparkscale itself reads it.
json_value = parse_offset


def epoch(timestamp: str) -> float:
    """A progress timestamp (ISO 8601, ``Z`` for UTC) in epoch seconds."""
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


# ------------------------------------------------------------------------------ the report
def fmt(value: float | None, pattern: str) -> str:
    return "n/a" if value is None or math.isnan(value) else pattern.format(value)


def median_range(values: Sequence[float], pattern: str = "{:.0f}") -> str:
    """A policy's runs of one figure: the median, and its range when there are several runs."""
    if not values:
        return "-"
    ordered = sorted(values)
    median = fmt(statistics.median(ordered), pattern)
    if len(ordered) == 1:
        return median
    return f"{median} ({fmt(ordered[0], pattern)}-{fmt(ordered[-1], pattern)})"


def write_report(path: Path, text: str, data: Any, indent: int | None = None) -> None:
    """The report ``path`` (markdown) and its data beside it (``.json``): every run's figures."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.with_suffix(".json").write_text(json.dumps(data, indent=indent), encoding="utf-8")
