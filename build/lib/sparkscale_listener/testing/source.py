"""A controllable streaming source for tests and demos: ``spark.readStream.format("sparkscale_test")``.

Rows arrive at ``rowsPerSecond`` (changeable while the query runs), each micro-batch reads at most
``maxRowsPerBatch`` of them, and every row costs about ``costMs`` of executor time. Because the
source reports its latest offset, the progress events show a real backlog whenever arrivals
outrun the query: exactly what the autoscaler needs to see.

Options:

``rowsPerSecond`` (float, default 100)
    Arrival rate at the start.
``controlFile`` (path, optional)
    A text file holding rate changes; see :func:`set_rate`. Each line is ``<rate>`` or
    ``<epoch seconds> <rate>``; a line without a time takes effect at the file's modification time.
    When the reader starts, the file's last line (if any) overrides ``rowsPerSecond``. Afterwards
    the source re-reads the file on every offset request and applies new lines in order, each at
    its own time, so arrivals are integrated exactly over the rate steps even when the query polls
    late (a time is moved forward only past offsets already handed out, and never beyond now).
    A rewritten (shorter) file applies its last line. Missing file or malformed lines: ignored.
``maxRowsPerBatch`` (int, optional)
    Admission control: the default read limit becomes ``ReadMaxRows(n)``. Unset: read all available.
``partitions`` (int, default 2)
    Input partitions (tasks) per micro-batch.
``costMs`` (float, default 0)
    Executor time per row.
``costMode`` (``cpu`` or ``sleep``, default ``cpu``)
    ``cpu``: a fixed-iteration CPU loop (calibrated once in the driver and shipped with each
    partition, so every task does the same work for the same rows; slower under CPU contention,
    like real work). ``sleep``: the task sleeps ``costMs`` per row (paced against a deadline, so
    the total is exact): busy time then scales with executors even on an over-committed machine.

Fault injection (for the rollback tests; a failing task raises before it yields any row, so Spark's
retry of the task on another executor keeps every row exactly once):

``failOnExecutorsAbove`` (int, optional)
    A task fails when it runs on an executor whose numeric id is greater than this: "the
    executors a scale-up added are broken". The Python worker cannot see its executor id through
    ``TaskContext``; it is read on Linux from the command line of the executor JVM, found by
    walking up the process tree (``--executor-id``). Where it cannot be found (the driver in
    ``local`` mode, a non-numeric id, no ``/proc``) the task does not fail.
``failIfFileExists`` (path, optional)
    Every task fails while this file exists (checked on the executor at each task), so the test
    decides when the query starts failing: with Spark's task retries exhausted, the query
    terminates with an exception.

Rows are ``(id long, ts timestamp)``: ids are 0, 1, 2, ... exactly once and in order (offsets are
``{"offset": rows generated so far}``); ``ts`` is each row's arrival time from the rate integration.
After a restart from a checkpoint the arrival clock restarts at the checkpointed offset.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

NAME = "sparkscale_test"
SCHEMA = "id long, ts timestamp"


def set_rate(control_file: str, rows_per_second: float, at: float | None = None) -> None:
    """Step the arrival rate of every ``sparkscale_test`` source that reads ``control_file``.

    Appends ``"<at> <rate>"`` (``at`` defaults to now) and fsyncs, so the change is timed by the
    caller, not by when the source next polls.
    """
    if rows_per_second < 0:
        raise ValueError(f"rows_per_second must be >= 0, got {rows_per_second}")
    stamp = time.time() if at is None else at
    with open(control_file, "a", encoding="utf-8") as f:
        f.write(f"{stamp:.6f} {rows_per_second:g}\n")
        f.flush()
        os.fsync(f.fileno())


def register(spark: Any) -> None:
    """Register the source as ``sparkscale_test`` on ``spark``.

    The module is pickled by value so that executors' Python workers need not be able to import
    this package (it is often only on the driver's ``sys.path``). Unless ``PYSPARK_PYTHON`` says
    otherwise, the source's Python processes run this interpreter: Spark's default, ``python3`` on
    the PATH, is often not the virtualenv that has pyarrow (which Python data sources need).
    """
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    sc = spark.sparkContext
    saved = sc.pythonExec
    if "PYSPARK_PYTHON" not in os.environ:
        sc.pythonExec = sys.executable  # captured by the registration only; restored below
    try:
        spark.dataSource.register(SparkscaleTestSource)
    finally:
        sc.pythonExec = saved


def _parse_control(text: str, mtime: float) -> list[tuple[float, float]]:
    """Lines of ``[<epoch seconds>] <rate>`` -> [(time, rate)]; malformed lines are skipped."""
    changes = []
    for line in text.splitlines():
        parts = line.split()
        try:
            if len(parts) == 1:
                changes.append((mtime, float(parts[0])))
            elif len(parts) == 2:
                changes.append((float(parts[0]), float(parts[1])))
        except ValueError:
            continue
    return [(t, r) for t, r in changes if r >= 0 and math.isfinite(r) and math.isfinite(t)]


class ArrivalClock:
    """Rows generated so far as the integral of a piecewise-constant rate (pure; unit-testable)."""

    def __init__(self, rate: float, start_time: float, start_rows: float = 0.0) -> None:
        # segments[i] = (time, rows generated at that time, rate from then on)
        self.segments: list[tuple[float, float, float]] = [(start_time, start_rows, rate)]
        self.observed = start_time  # latest time whose row count was handed out

    def available(self, now: float) -> float:
        """Rows generated by ``now``; later rate changes cannot be timed before ``now``."""
        self.observed = max(self.observed, now)
        return self.rows_at(now)

    def rows_at(self, t: float) -> float:
        seg = self.segments[0]
        for s in self.segments:
            if s[0] <= t:
                seg = s
            else:
                break
        t0, rows0, rate = seg
        return rows0 + rate * max(0.0, t - t0)

    def change_rate(self, t: float, rate: float, now: float) -> None:
        """Apply a change at ``t``, clamped to [last observation, now]: offsets already handed
        out must not move, so a change cannot take effect before them."""
        last_t = self.segments[-1][0]
        t = min(max(t, last_t, self.observed), max(now, last_t))
        rows = self.rows_at(t)
        if t == last_t:
            self.segments[-1] = (t, self.segments[-1][1], rate)
        else:
            self.segments.append((t, rows, rate))

    def rebase(self, rows: float, now: float) -> None:
        """Continue from ``rows`` at ``now`` (restart from a checkpoint ahead of the clock)."""
        self.segments = [(now, rows, self.segments[-1][2])]
        self.observed = now

    def time_of_row(self, row: float) -> float:
        """Arrival time of row index ``row`` (inverse of :meth:`rows_at`)."""
        for i, (t0, rows0, rate) in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            if nxt is None or row < nxt[1]:
                if rate <= 0:
                    return t0
                return t0 + max(0.0, row - rows0) / rate
        return self.segments[-1][0]

    def segments_for(self, lo: int, hi: int) -> list[tuple[float, float, float]]:
        """The segments needed to time rows [lo, hi): shipped with a partition."""
        out = []
        for i, seg in enumerate(self.segments):
            nxt_rows = self.segments[i + 1][1] if i + 1 < len(self.segments) else math.inf
            if nxt_rows > lo and seg[1] < hi:
                out.append(seg)
        return out or [self.segments[-1]]


EXECUTOR_ID_ARG = "--executor-id"
# Per-process cache of the executor id, kept in the environment: this module is pickled by value,
# so its globals are fresh in every task, while a reused Python worker keeps its environment.
_EXECUTOR_ID_ENV = "SPARKSCALE_TEST_EXECUTOR_ID"


def executor_id_from_process_tree(pid: int | None = None, max_depth: int = 16) -> str | None:
    """The ``--executor-id`` of the nearest ancestor (or self) whose command line has one.

    Linux only (``/proc``); None when no ancestor is an executor (the driver) or on failure.
    """
    current = os.getpid() if pid is None else pid
    for _ in range(max_depth):
        try:
            with open(f"/proc/{current}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            return None
        for i, arg in enumerate(args[:-1]):
            if arg == EXECUTOR_ID_ARG.encode():
                return args[i + 1].decode(errors="replace")
            if arg.startswith(EXECUTOR_ID_ARG.encode() + b"="):
                return arg.split(b"=", 1)[1].decode(errors="replace")
        try:
            with open(f"/proc/{current}/status", encoding="utf-8") as f:
                parent = next((int(line.split()[1]) for line in f if line.startswith("PPid:")), 0)
        except (OSError, ValueError, IndexError):
            return None
        if parent <= 1:
            return None
        current = parent
    return None


def current_executor_id() -> str | None:
    """This process's executor id (see :func:`executor_id_from_process_tree`), cached per process."""
    pid = os.getpid()
    cached = os.environ.get(_EXECUTOR_ID_ENV, "")
    cached_pid, _, value = cached.partition(":")
    if cached_pid == str(pid):
        return value or None
    found = executor_id_from_process_tree(pid)
    os.environ[_EXECUTOR_ID_ENV] = f"{pid}:{found or ''}"
    return found


class InjectedFault(RuntimeError):
    """Raised by a task of the ``sparkscale_test`` source when a fault-injection option says so."""


def _calibrate_iterations_per_ms() -> int:
    """How many iterations of :func:`_burn` take about 1 ms here (measured once, in the driver)."""
    n = 20000
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        _burn(n)
        best = min(best, time.perf_counter() - t0)
    return max(1, int(n / (best * 1000.0)))


def _burn(iterations: int) -> int:
    # A fixed amount of CPU work: slower under contention, like real per-row work would be.
    x = 1
    for _ in range(iterations):
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
    return x


class _RangePartition(InputPartition):
    """Rows [lo, hi), with the work per row and the arrival-rate segments that time them."""

    def __init__(self, lo: int, hi: int, iterations_per_row: int,
                 segments: list[tuple[float, float, float]], sleep_ms_per_row: float = 0.0,
                 fail_on_executors_above: int | None = None,
                 fail_if_file_exists: str | None = None) -> None:
        super().__init__((lo, hi))
        self.lo = lo
        self.hi = hi
        self.iterations_per_row = iterations_per_row
        self.sleep_ms_per_row = sleep_ms_per_row
        self.segments = segments
        self.fail_on_executors_above = fail_on_executors_above
        self.fail_if_file_exists = fail_if_file_exists


class SparkscaleTestReader(DataSourceStreamReader):
    def __init__(self, raw_options: Mapping[str, str]) -> None:
        # Spark hands options over lower-cased; accept either spelling.
        options = {k.lower(): v for k, v in raw_options.items()}
        self.rate = float(options.get("rowspersecond", "100"))
        if self.rate < 0:
            raise ValueError(f"rowsPerSecond must be >= 0, got {self.rate}")
        max_rows = options.get("maxrowsperbatch")
        self.max_rows = int(max_rows) if max_rows else None
        if self.max_rows is not None and self.max_rows <= 0:
            raise ValueError(f"maxRowsPerBatch must be > 0, got {max_rows}")
        self.partitions_n = max(1, int(options.get("partitions", "2")))
        self.cost_ms = float(options.get("costms", "0"))
        if self.cost_ms < 0 or not math.isfinite(self.cost_ms):
            raise ValueError(f"costMs must be a number >= 0, got {self.cost_ms}")
        cost_mode = options.get("costmode", "cpu").strip().lower()
        if cost_mode not in ("cpu", "sleep"):
            raise ValueError(f"costMode must be cpu or sleep, got {cost_mode!r}")
        self.sleep_ms_per_row = self.cost_ms if cost_mode == "sleep" else 0.0
        self.iterations_per_row = (
            round(self.cost_ms * _calibrate_iterations_per_ms())
            if self.cost_ms > 0 and cost_mode == "cpu" else 0)
        self.control_file = options.get("controlfile") or None
        above = options.get("failonexecutorsabove")
        try:
            self.fail_on_executors_above = int(above) if above not in (None, "") else None
        except ValueError:
            raise ValueError(f"failOnExecutorsAbove must be an integer, got {above!r}") from None
        self.fail_if_file_exists = options.get("failiffileexists") or None
        self.clock = ArrivalClock(self.rate, time.time())
        self._control_lines_applied = 0
        self._poll_control(time.time(), initial=True)

    def _poll_control(self, now: float, initial: bool = False) -> None:
        if not self.control_file:
            return
        try:
            with open(self.control_file, encoding="utf-8") as f:
                text = f.read()
            mtime = os.path.getmtime(self.control_file)
        except OSError:
            return  # missing or unreadable: keep the current rate
        changes = _parse_control(text, mtime)
        if initial:
            # The file states the rate in force now; its history predates this reader.
            if changes:
                self.clock = ArrivalClock(changes[-1][1], now)
            self._control_lines_applied = len(changes)
            return
        if len(changes) < self._control_lines_applied:  # rewritten: its last line is the new rate
            new = changes[-1:]
        else:
            new = changes[self._control_lines_applied:]
        for t, rate in new:
            self.clock.change_rate(t, rate, now)
        self._control_lines_applied = len(changes)

    def _available(self) -> int:
        now = time.time()
        self._poll_control(now)
        return math.floor(self.clock.available(now) + 1e-9)

    def initialOffset(self) -> dict:
        return {"offset": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = int(start["offset"])
        available = self._available()
        if available < begin:
            # Restarted from a checkpoint: arrivals continue from there, without a burst.
            self.clock.rebase(begin, time.time())
            available = begin
        end = available
        if isinstance(limit, ReadMaxRows):
            end = min(end, begin + limit.max_rows)
        return {"offset": end}

    def reportLatestOffset(self) -> dict:
        return {"offset": self._available()}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        lo, hi = int(start["offset"]), int(end["offset"])
        if hi <= lo:
            return []
        n = min(self.partitions_n, hi - lo)
        bounds = [lo + (hi - lo) * i // n for i in range(n + 1)]
        return [_RangePartition(a, b, self.iterations_per_row, self.clock.segments_for(a, b),
                                self.sleep_ms_per_row, self.fail_on_executors_above,
                                self.fail_if_file_exists)
                for a, b in itertools.pairwise(bounds) if b > a]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, _RangePartition)
        _inject_faults(partition)
        clock = ArrivalClock(0.0, 0.0)
        clock.segments = list(partition.segments)
        pace = partition.sleep_ms_per_row / 1000.0
        started = time.monotonic()
        for i in range(partition.lo, partition.hi):
            if partition.iterations_per_row:
                _burn(partition.iterations_per_row)
            if pace > 0:
                # Sleep to a deadline, not per row: sub-millisecond costs still add up exactly.
                ahead = started + (i - partition.lo + 1) * pace - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            yield (i, datetime.fromtimestamp(clock.time_of_row(i), tz=timezone.utc))

    def commit(self, end: dict) -> None:
        pass


def _inject_faults(partition: _RangePartition) -> None:
    """Raise :class:`InjectedFault` before any row is produced when an option asks for it."""
    # getattr: partitions pickled by an older version of this module have no such fields.
    marker = getattr(partition, "fail_if_file_exists", None)
    if marker and os.path.exists(marker):
        raise InjectedFault(f"sparkscale_test: injected failure because {marker} exists "
                            f"(rows [{partition.lo}, {partition.hi}))")
    above = getattr(partition, "fail_on_executors_above", None)
    if above is not None:
        executor = current_executor_id()
        if executor is not None and executor.isdigit() and int(executor) > above:
            raise InjectedFault(f"sparkscale_test: injected failure on executor {executor} "
                                f"(failOnExecutorsAbove={above}; rows [{partition.lo}, {partition.hi}))")


class SparkscaleTestSource(DataSource):
    """``spark.readStream.format("sparkscale_test")``; see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SparkscaleTestReader(self.options)


__all__ = ["NAME", "SCHEMA", "ArrivalClock", "InjectedFault", "SparkscaleTestSource",
           "current_executor_id", "executor_id_from_process_tree", "register", "set_rate"]
