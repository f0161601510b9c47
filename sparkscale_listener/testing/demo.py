"""A real streaming job on a real multi-executor cluster, under a load that steps up and down.

Used by ``make demo`` (through ``examples/demo.py``) and by the integration tests, so what the
demo shows is what the tests check. The cluster is ``local-cluster[N,1,...]``: real executor
JVMs under an in-process standalone Master, straight from the pyspark wheel.

The per-row work sleeps rather than spins: on a 2-core machine, CPU-bound work cannot get faster
with a third executor, whereas the I/O-bound enrichment many streaming jobs do (calls to a
service, a database) scales with task slots, which is what an executor autoscaler buys.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..testing import source as testing_source

log = logging.getLogger(__name__)

# Fast settings for a demo: seconds where production defaults are minutes.
DEMO_SPARKSCALE_CONF: dict[str, str] = {
    "spark.sparkscale.minExecutors": "1",
    "spark.sparkscale.maxExecutors": "3",
    "spark.sparkscale.initialExecutors": "1",
    "spark.sparkscale.interval": "2s",
    "spark.sparkscale.metricsWindow": "10s",
    "spark.sparkscale.stabilizationInterval": "4s",
    "spark.sparkscale.scaleDownInterval": "16s",
    "spark.sparkscale.catchUpDuration": "30s",
    "spark.sparkscale.backlogThreshold": "15s",
    "spark.sparkscale.provisioningTimeout": "60s",
}


def cluster_conf(workdir: Path, workers: int = 3, worker_memory_mb: int = 1024,
                 extra: dict[str, str] | None = None) -> dict[str, str]:
    """Spark settings for a small local-cluster: one 1-core executor per worker at most."""
    conf = {
        "spark.master": f"local-cluster[{workers},1,{worker_memory_mb}]",
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.showConsoleProgress": "false",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(workdir / "events"),
        "spark.eventLog.compress": "false",  # plain JSON lines, readable by tests and people
        "spark.sql.streaming.metricsEnabled": "true",
    }
    (workdir / "events").mkdir(parents=True, exist_ok=True)
    conf.update(DEMO_SPARKSCALE_CONF)
    conf.update(extra or {})
    return conf


def build_session(app_name: str, conf: dict[str, str]) -> Any:
    """The user's one line, with the demo's settings."""
    from pyspark.sql import SparkSession

    from .. import autoscale

    builder = SparkSession.builder.appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    return autoscale(builder)


@dataclass
class StreamingJob:
    """One query: the controllable source -> per-row work -> a JSON file sink, exactly once."""

    spark: Any
    workdir: Path
    name: str = "demo"
    rows_per_second: float = 20.0
    max_rows_per_batch: int = 400
    partitions: int = 6
    cost_ms: float = 10.0
    trigger_s: float = 1.0
    source_options: dict[str, str] = field(default_factory=dict)  # e.g. fault injection for tests
    query_name: str = ""  # the streaming query's name when not ``name`` (which names its files)
    control_file: Path = field(init=False)
    query: Any = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.control_file = self.workdir / f"{self.name}.rate"
        self.out_dir = self.workdir / f"{self.name}-out"
        self.checkpoint = self.workdir / f"{self.name}-checkpoint"
        testing_source.set_rate(str(self.control_file), self.rows_per_second)

    def start(self) -> StreamingJob:
        testing_source.register(self.spark)
        reader = (self.spark.readStream.format(testing_source.NAME)
                  .option("controlFile", str(self.control_file))
                  .option("rowsPerSecond", str(self.rows_per_second))
                  .option("maxRowsPerBatch", str(self.max_rows_per_batch))
                  .option("partitions", str(self.partitions))
                  .option("costMs", str(self.cost_ms))
                  .option("costMode", "sleep"))
        for key, value in self.source_options.items():
            reader = reader.option(key, value)
        stream = reader.load()
        self.query = (stream.writeStream.format("json").queryName(self.query_name or self.name)
                      .option("path", str(self.out_dir))
                      .option("checkpointLocation", str(self.checkpoint))
                      .trigger(processingTime=f"{self.trigger_s} seconds")
                      .start())
        return self

    def set_rate(self, rows_per_second: float) -> None:
        testing_source.set_rate(str(self.control_file), rows_per_second)

    def backlog(self) -> float | None:
        progress = self.query.lastProgress if self.query is not None else None
        if not progress:
            return None
        total = None
        for source in progress.get("sources", []):
            latest, end = source.get("latestOffset"), source.get("endOffset")
            try:
                lag = json.loads(latest)["offset"] - json.loads(end)["offset"]
                total = (total or 0) + max(0, lag)
            except (TypeError, ValueError, KeyError):
                continue
        return total

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()

    def written_ids(self) -> list[int]:
        """Every id in the sink (read through the sink's own log, so only committed files)."""
        frame = self.spark.read.schema(testing_source.SCHEMA).json(str(self.out_dir))
        return [row.id for row in frame.select("id").collect()]


def exactly_once(ids: Sequence[int]) -> bool:
    """The sink holds ids 0..n-1, each once: nothing lost, nothing duplicated."""
    return len(ids) == len(set(ids)) and (not ids or sorted(ids) == list(range(max(ids) + 1)))


def read_event_log(events_dir: Path) -> list[dict[str, Any]]:
    """Every event of the (uncompressed) Spark event logs under ``events_dir``. Rolling logs are
    folders, with hidden .crc and status files beside the logs. The log of a running application
    may end in a line still being written: that one is left out."""
    events = []
    for path in sorted(p for p in events_dir.rglob("*") if p.is_file() and not p.name.startswith(".")):
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for i, line in enumerate(lines):
            try:
                events.append(json.loads(line))
            except ValueError:
                if i < len(lines) - 1 or not path.name.endswith(".inprogress"):
                    raise
    return events


@dataclass(frozen=True)
class LoadStep:
    at_s: float
    rows_per_second: float
    label: str


# The demo's load: 1 slot handles ~100 rows/s at 10 ms per row.
DEMO_STEPS: tuple[LoadStep, ...] = (
    LoadStep(0, 30, "low"),
    LoadStep(25, 220, "high"),
    LoadStep(95, 25, "low again"),
)


#: (what, seconds) of every :func:`wait_for` that ended, oldest first: where a scenario spends its
#: time (the real-Spark tests' conftest.py lists the long ones at the end of each file's log).
WAITED: list[tuple[str, float]] = []


def wait_for(condition: Callable[[], Any], timeout_s: float, poll_s: float = 0.2,
             what: str = "condition") -> Any:
    """Poll until ``condition()`` is truthy; raise TimeoutError naming ``what`` at the deadline."""
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        value = condition()
        if value:
            waited = time.monotonic() - started
            WAITED.append((what, waited))
            log.info("waited %.1fs for %s", waited, what)  # as it happens: pytest -o log_cli=true
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(poll_s)


#: (what, lines) of every :func:`wait_for_autoscaler` of ``DECIDED_AFTER_S`` or more that ended:
#: what the autoscaler decided meanwhile, each run of one action and reason once (the conftest
#: lists them beside the long waits: which decision held a slow scale-down).
DECIDED: list[tuple[str, list[str]]] = []
DECIDED_AFTER_S = 30.0


def decided_since(scaler: Any, since: float) -> list[str]:
    """The decisions since ``since`` (the autoscaler's clock), consecutive repeats of an action
    and reason folded into one line with their count: ``+12s hold 2->2 (x5): reason``."""
    runs: list[list[Any]] = []  # [seconds after since, action, reason, count]
    for d in scaler.decisions():
        if d["time"] < since:
            continue
        action = (f"{d['action']} {d['from_executors']}->{d['to_executors']}"
                  f"{' applied' if d['applied'] else ''}")
        reason = str(d["reason"])[:160]
        if runs and runs[-1][1:3] == [action, reason]:
            runs[-1][3] += 1
        else:
            runs.append([d["time"] - since, action, reason, 1])
    return [f"+{t:.0f}s {action}{f' (x{n})' if n > 1 else ''}: {reason}" for t, action, reason, n in runs]


def cost_learned(scaler: Any) -> bool:
    """Whether the autoscaler has fitted its model of every running query's batch cost (a decision
    giving each query's cost of a row): its decisions wait while it learns what a batch costs, from
    a few warm batches. Where batches are long at the high load, a scenario steps its load after
    this rather than pay for the learning at the long batches. (Any decision but "not ready" does
    not tell it: in one run the step came after such a decision with no warm batch learnt yet, and
    the scale-up waited 40 s for three warm batches of 10 s.) Not a general rule: a first fit from
    batches still warming up (a Kafka query's first batches on a fresh executor get faster for
    longer than the warm-up the model skips) can ask for more executors at the low load, and that
    decision is the one waited for."""
    return any(d.get("queries") and all(q.get("slot_seconds_per_row") is not None
                                        for q in d["queries"].values())
               for d in scaler.decisions())


def wait_for_autoscaler(scaler: Any, condition: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """:func:`wait_for`, with the autoscaler's status and latest decisions in the failure message."""
    since = getattr(scaler, "clock", time.time)()
    try:
        value = wait_for(condition, timeout_s, what=what)
        if WAITED[-1][1] >= DECIDED_AFTER_S:
            DECIDED.append((what, decided_since(scaler, since)))
        return value
    except TimeoutError as e:
        status = scaler.status()
        shown = {k: status[k] for k in ("target_executors", "live_executors", "paused", "pause_reason",
                                        "stopped", "healthy_target", "last_error")}
        recent = [(d["action"], d["from_executors"], d["to_executors"], d["applied"], d["reason"])
                  for d in scaler.decisions()[-6:]]
        raise AssertionError(f"{e}\nstatus: {shown}\nlast decisions: {recent}") from None


def timeline(job: StreamingJob, scaler: Any, steps: Sequence[LoadStep], stop_when: Callable[[], bool],
             deadline_s: float, every_s: float = 2.0, out: Any = sys.stdout) -> Iterator[dict[str, Any]]:
    """Drive the load steps and yield (and print) one timeline row every ``every_s``."""
    start = time.monotonic()
    pending = list(steps)
    current = steps[0]
    print(f"{'t(s)':>5} {'load':>10} {'rows/s':>7} {'backlog':>8} {'executors':>9} {'target':>6}  decision",
          file=out)
    while True:
        t = time.monotonic() - start
        while pending and pending[0].at_s <= t:
            step = pending.pop(0)
            job.set_rate(step.rows_per_second)
            current = step
        status = scaler.status()
        last = status.get("last_decision") or {}
        row = {
            "t": t, "load": current.label, "rate": current.rows_per_second, "backlog": job.backlog(),
            "live": status["live_executors"], "target": status["target_executors"],
            "action": last.get("action"), "reason": last.get("reason", ""),
        }
        backlog = "-" if row["backlog"] is None else f"{row['backlog']:.0f}"
        print(f"{t:5.0f} {current.label:>10} {current.rows_per_second:7.0f} {backlog:>8} "
              f"{row['live']:9d} {row['target']:6d}  {(row['reason'] or '')[:90]}", file=out, flush=True)
        yield row
        if (not pending and stop_when()) or t > deadline_s:
            return
        time.sleep(every_s)


def quiet_loggers(spark: Any, *loggers: str) -> None:
    """Only fatal lines from these driver loggers (errors expected in a demo or a test)."""
    jvm = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.FATAL
    for logger in loggers:
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, level)


def quiet_executor_removal_noise(spark: Any) -> None:
    """Removing an executor makes Spark log RPC errors to it for a few seconds; expected here,
    and they would bury the timeline."""
    quiet_loggers(spark, "org.apache.spark.network.client.TransportClient",
                  "org.apache.spark.network.server.TransportRequestHandler",
                  "org.apache.spark.storage.BlockManagerMasterEndpoint",
                  "org.apache.spark.scheduler.TaskSchedulerImpl")


def run_demo(workdir: Path | None = None) -> int:
    import logging

    from .. import autoscaler, stop_autoscaler

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("sparkscale").setLevel(logging.INFO)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the demo cluster stays on loopback
    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="sparkscale-demo-")) if workdir is None else workdir
    print(f"sparkscale demo: local-cluster with up to 3 executors; work in {workdir}")
    spark = build_session("sparkscale-demo", cluster_conf(workdir))
    spark.sparkContext.setLogLevel("ERROR")
    quiet_executor_removal_noise(spark)
    scaler = autoscaler(spark)
    job = StreamingJob(spark, workdir).start()
    try:
        ups = downs = 0

        def scaled_back() -> bool:
            nonlocal ups, downs
            actions = [d["action"] for d in scaler.decisions(applied_only=True)]
            ups, downs = actions.count("scale_up"), actions.count("scale_down")
            return ups >= 1 and downs >= 1 and scaler.status()["live_executors"] == 1

        for _ in timeline(job, scaler, DEMO_STEPS, scaled_back, deadline_s=270):
            pass
        # Stopping the query interrupts the batch it is writing, which Spark logs as an error with
        # ~45 lines of stack; expected here, and it would bury the summary below.
        quiet_loggers(spark, "org.apache.spark.sql.execution.datasources.FileFormatWriter")
        job.stop()
        # Reading the sink back is a batch job: not one to scale up for (in one run the request was
        # still in flight as the session stopped, and Spark logged a stack trace after the result).
        stop_autoscaler(spark)
        ids = job.written_ids()
        exact = exactly_once(ids)
        print()
        print("applied scaling actions:")
        for d in scaler.decisions(applied_only=True):
            print(f"  {d['action']:<10} {d['from_executors']} -> {d['to_executors']}: {d['reason']}")
        print(f"\nrows written: {len(ids)}, each exactly once: {exact}")
        print(f"scale-ups: {ups}, scale-downs: {downs}")
        ok = ups >= 1 and downs >= 1 and exact
        print("DEMO OK" if ok else "DEMO FAILED: expected at least one scale-up, one scale-down, no loss")
        return 0 if ok else 1
    finally:
        job.stop()
        spark.stop()
        if own and os.environ.get("SPARKSCALE_KEEP_DEMO") != "1":
            # The event log stays (it is what a replay reads); the query's files and checkpoint go.
            for child in workdir.iterdir():
                if child.is_dir() and child.name != "events":
                    shutil.rmtree(child, ignore_errors=True)
                elif child.is_file():
                    child.unlink(missing_ok=True)
        logs = sorted((workdir / "events").glob("*")) if (workdir / "events").is_dir() else []
        if logs:
            print(f"event log kept: {logs[-1]}\nreplay it through the decision code: "
                  f"python -m sparkscale_listener replay {logs[-1]}")


if __name__ == "__main__":
    raise SystemExit(run_demo())
