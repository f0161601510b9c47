"""What running sparkscale costs (issue 14): run on purpose, prints its numbers and writes
``benchmarks/results/cost.md``::

    .venv/bin/python benchmarks/bench_cost.py [--pairs N] [bridge] [tick] [latency] [sim]
    .venv/bin/python benchmarks/bench_cost.py --against REV   # the tick, this tree against commit REV

Sections (all by default):

* ``bridge``: the JVM bridge's listener on its real queue of a real SparkContext. A small Java class
  (``benchmarks/jvm/ListenerFlood.java``, compiled here against pyspark's jars and the bridge jar,
  put on ``spark.driver.extraClassPath``) posts synthetic micro-batch jobs (job/stage/task events
  tagged with 100 query ids, 1,000 executors) from a JVM thread: saturated throughput (the poster
  waits when the queue is near full), then paced rates until the queue drops events. Beside it, the
  listener's handlers alone and a no-op listener on a queue of its own (Spark's per-event cost).
  Then the snapshot as the Python side polls it, 1,000 executors and 100 queries deep.
* ``tick``: the real ``Autoscaler.step`` on scripted samples (1/10/100 queries x 10/100/1,000
  executors), with a recording realizer and the real gauge and UI publishers over a counting sink.
* ``latency``: the same streaming query on ``local-cluster[2,1,1024]`` with and without the
  autoscaler (``spark.sparkscale.mode=recommend``), separate driver processes, alternating.
* ``sim``: the simulator's speed (a simulated day of 5 queries).

Numbers depend on the machine and on what else runs on it; compare runs on one machine only.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere: the package is the repository's
    sys.path.insert(0, str(ROOT))

from sparkscale_listener.collect.collector import MetricCollector  # noqa: E402
from sparkscale_listener.config.core import AutoscalerConfig  # noqa: E402
from sparkscale_listener.metrics import BatchRecord, ClusterMetrics, ExecutorInfo, MetricSample, QueryMetrics  # noqa: E402
from sparkscale_listener.model import WARMUP_BATCHES  # noqa: E402
from sparkscale_listener.realize.realizer import RealizationResult, ScalingRealizer  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "cost.md"
REPORT_COMMAND = ".venv/bin/python benchmarks/bench_cost.py"
SECTIONS = ("bridge", "tick", "latency", "sim")
JAVA_SOURCE = ROOT / "benchmarks" / "jvm" / "ListenerFlood.java"
FLOOD_CLASS = "io.sparkscale.bench.ListenerFlood"

# The targets, read against (reported, never asserted).
TARGET_TASK_ENDS_PER_S = 1_000_000
TARGET_TICK_MS = 5.0
TARGET_LOCK_MS = 1.0  # the listener's lock held per snapshot
TARGET_COLLECT_MS = 20.0  # the collector's collect() at 100 queries / 1,000 executors
TARGET_LATENCY_RATIO = 0.02

# Bridge workload: 100 queries x 64 micro-batches (the listener keeps 64 per query) x 32 tasks,
# at most 16 running per stage, over 1,000 executors of 4 cores.
EXECUTORS, QUERIES, BATCHES, TASKS, WINDOW = 1000, 100, 64, 32, 16
BIG_CAPACITY = 200_000  # events: ~100 ms of buffer at 2 M events/s (Spark's default is 10,000)


# ---------------------------------------------------------------------------------------------
# Figures (pure; tests/unit/benchmarks/test_bench_cost.py checks them)
# ---------------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 1]): a value that occurred, never an interpolation."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    """min, median, p90 and max of ``values``."""
    return {"n": len(values), "min": min(values), "median": statistics.median(values),
            "p90": percentile(values, 0.9), "max": max(values)}


def rate(count: float, seconds: float) -> float:
    """Events per second; 0 for an empty interval."""
    return count / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class RatioSummary:
    """Per pair: median latency with / median latency without; their median and spread, and the
    ratio of the pooled medians (every batch of every run of each arm)."""

    ratios: tuple[float, ...]
    median: float
    low: float
    high: float
    pooled: float

    @property
    def overhead_pct(self) -> float:
        return (self.median - 1.0) * 100.0

    def verdict(self, target: float = TARGET_LATENCY_RATIO) -> str:
        """Met or missed when the pairs agree to within ``target``; otherwise the runs cannot tell
        an overhead that small from their own spread, and say so."""
        half_spread = (self.high - self.low) / 2.0
        if half_spread > target:
            return (f"**not separable**: the pairs spread +-{half_spread:.1%} around each other, more "
                    f"than the {target:.0%} to resolve (more pairs, or a quieter machine)")
        return "**met**" if abs(self.median - 1.0) <= target else "**missed**"


def latency_ratio(pairs: Sequence[tuple[Sequence[float], Sequence[float]]]) -> RatioSummary:
    """``pairs``: (batch latencies with, batch latencies without) of each A/B pair of runs."""
    ratios = tuple(statistics.median(w) / statistics.median(wo) for w, wo in pairs)
    pooled_with = [x for w, _ in pairs for x in w]
    pooled_without = [x for _, wo in pairs for x in wo]
    return RatioSummary(ratios, statistics.median(ratios), min(ratios), max(ratios),
                        statistics.median(pooled_with) / statistics.median(pooled_without))


def first_dropping_rate(paced: Sequence[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(highest rate posted with nothing dropped, lowest rate at which the queue dropped), in task
    ends per second posted, from the paced runs; None where there is none."""
    clean = [r["postedTaskEndsPerSecond"] for r in paced if r["dropped"] == 0]
    dropping = [r["postedTaskEndsPerSecond"] for r in paced if r["dropped"] > 0]
    return (max(clean) if clean else None), (min(dropping) if dropping else None)


def latency_order(pairs: int) -> list[str]:
    """with/without alternating and counterbalanced (AB BA AB ...), so drift in the machine's load
    falls on both arms alike."""
    order: list[str] = []
    for i in range(pairs):
        order += ["with", "without"] if i % 2 == 0 else ["without", "with"]
    return order


# ---------------------------------------------------------------------------------------------
# 3. The control loop's tick on scripted samples (pure Python)
# ---------------------------------------------------------------------------------------------


class Feed(MetricCollector):
    """The benchmark's clock and collector: hands out the sample the benchmark set for this tick
    (making it is the collector's cost, not the loop's: the bridge section measures the collector)."""

    def __init__(self) -> None:
        self.time = 0.0
        self.sample: MetricSample | None = None

    def set(self, sample: MetricSample) -> None:
        self.time, self.sample = sample.time, sample

    def collect(self, now: float) -> MetricSample:
        assert self.sample is not None
        return self.sample


class RecordingRealizer(ScalingRealizer):
    """Accepts every target and records it (the cluster manager is not the loop's cost)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self._requested = 0

    @property
    def requested_total(self) -> int:
        return self._requested

    def baseline(self, total: int) -> RealizationResult:
        self.calls.append(("baseline", total))
        self._requested = total
        return RealizationResult(total)

    def realize(self, target: int, remove_first: Collection[str] = ()) -> RealizationResult:
        self.calls.append(("realize", target, len(remove_first)))
        self._requested = target
        return RealizationResult(target)


class CountingSink:
    """Stands in for the JVM bridge under the gauge and UI publishers: counts the py4j calls a
    real tick would make (each a round trip to the driver JVM) and the characters sent."""

    def __init__(self) -> None:
        self.calls = 0
        self.chars = 0

    def _call(self, text: str = "") -> None:
        self.calls += 1
        self.chars += len(text)

    def publish_gauges(self, values: Mapping[str, float], removed: Sequence[str], text: str) -> None:
        self._call(text)

    def post_tick_event(self, summary_json: str, logged: bool) -> None:
        self._call(summary_json)


def tick_samples(queries: int, executors: int, ticks: int, interval_s: float = 10.0,
                 seed: int = 1) -> Iterator[MetricSample]:
    """Cumulative samples of ``queries`` steady-ish queries on ``executors`` 4-core executors, one
    per tick: each query's rate swings +-30 % on its own period (so batch sizes vary and the cost
    fit is computed), and the load keeps the slots about 65 % busy (inside the band: the loop
    decides "no change" most of the time, as it does in steady production). Made as they are
    asked for, keeping only each query's last 64 batches: the loop's own history is what holds
    the samples, as in production (all of them held, a tenth of the tick went to collecting
    garbage among them)."""
    rng = random.Random(seed)
    cores, trigger_s, cost = 4, 1.0, 0.002  # slot-seconds per row
    slots_per_query = executors * cores * 0.65 / queries
    base = [slots_per_query / cost * rng.uniform(0.8, 1.2) for _ in range(queries)]
    period = [rng.uniform(200, 600) for _ in range(queries)]
    infos = tuple(ExecutorInfo(str(i), host=f"host-{i % 50}", cores=cores,
                               running_tasks=rng.randint(0, cores), heap_used_ratio=0.4)
                  for i in range(executors))
    rows = [0.0] * queries
    recent: list[list[BatchRecord]] = [[] for _ in range(queries)]  # the last 64 of each
    made = [0] * queries
    busy = 0.0
    for k in range(ticks):
        t = (k + 1) * interval_s
        qs = {}
        for q in range(queries):
            r = base[q] * (1 + 0.3 * math.sin(2 * math.pi * t / period[q] + q))
            rows[q] += r * interval_s
            batches = WARMUP_BATCHES + int(t / trigger_s)
            # Each query's batches since the last tick, as the collector reports them.
            while made[q] * trigger_s + 0.8 <= t:
                i = made[q]
                start = i * trigger_s
                n = round(r * trigger_s)
                recent[q].append(BatchRecord(batch_id=i, start=start, duration_s=0.8, rows=n,
                                             since_previous_s=trigger_s if i else None, backlog=r * 0.5,
                                             task_s=n * cost, tasks=32, task_wall_s=0.6,
                                             executors_used=min(executors, 8), executors=executors))
                made[q] += 1
            del recent[q][:-64]
            qid = f"00000000-0000-0000-0000-{q:012d}"
            qs[qid] = QueryMetrics(
                query_id=qid, name=f"query-{q}", batches=batches, input_rows=int(rows[q]),
                batch_busy_ms=rows[q] * cost * 1000.0, batch_duration_ms=(batches - WARMUP_BATCHES) * 800.0,
                backlog=r * 0.5, input_rate=r, processed_rate=r, last_batch_duration_ms=800.0,
                trigger_interval_ms=trigger_s * 1000.0, last_progress_time=t,
                busy_ms=rows[q] * cost * 1000.0, tasks_finished=int(t) * 32, max_stage_tasks=4 * executors,
                recent_batches=tuple(recent[q]))
        busy += sum(base) * cost * interval_s * 1000.0
        cluster = ClusterMetrics(
            live_executors=executors, cores_per_executor=cores, executors=infos,
            slot_ms=executors * cores * t * 1000.0, busy_ms=busy, tasks_finished=k * 32 * queries,
            executors_added=executors, gc_ms=k * 10.0, run_ms=k * 1000.0, heap_used_ratio=0.4)
        yield MetricSample(t, cluster, qs)


@dataclass
class TickResult:
    queries: int
    executors: int
    times_ms: list[float]  # wall clock
    cpu_ms: list[float]  # this thread's CPU time: what the tick costs when the machine is shared
    py4j_calls_per_tick: float
    chars_per_tick: float
    errors: int
    decisions: dict[str, int] = field(default_factory=dict)

    @property
    def stats(self) -> dict[str, float]:
        return summary(self.times_ms)

    @property
    def cpu_stats(self) -> dict[str, float]:
        return summary(self.cpu_ms)


def bench_tick(queries: int, executors: int, warmup: int = 40, ticks: int = 100,
               profile: Callable[[Callable[[], Any]], Any] | None = None) -> TickResult:
    """The real ``Autoscaler`` with production defaults (interval 10 s, metricsWindow 60 s,
    scaleDownInterval 300 s: 34 samples of history), the built-in checkers, gauges and UI
    publisher; ``warmup`` ticks fill the history before ``ticks`` are timed."""
    autoscaler, feed, sink = _tick_arm("sparkscale_listener", executors)
    times: list[float] = []
    cpu: list[float] = []
    decisions: dict[str, int] = {}
    calls_before = chars_before = 0
    for k, sample in enumerate(tick_samples(queries, executors, warmup + ticks)):
        feed.set(sample)
        if k == warmup:
            calls_before, chars_before = sink.calls, sink.chars
        start, start_cpu = time.perf_counter(), time.thread_time()
        made = autoscaler.step() if profile is None or k < warmup else profile(autoscaler.step)
        elapsed = (time.perf_counter() - start) * 1000.0
        elapsed_cpu = (time.thread_time() - start_cpu) * 1000.0
        if k >= warmup:
            times.append(elapsed)
            cpu.append(elapsed_cpu)
            for d in made:
                decisions[d.action] = decisions.get(d.action, 0) + 1
    return TickResult(queries, executors, times, cpu, (sink.calls - calls_before) / ticks,
                      (sink.chars - chars_before) / ticks, autoscaler.status()["errors"], decisions)


def run_tick_section(grid_queries: Sequence[int] = (1, 10, 100),
                     grid_executors: Sequence[int] = (10, 100, 1000), ticks: int = 100) -> list[TickResult]:
    results = []
    for q in grid_queries:
        for e in grid_executors:
            r = bench_tick(q, e, ticks=ticks)
            s, c = r.stats, r.cpu_stats
            print(f"  tick {q:>3} queries x {e:>4} executors: median {s['median']:.2f} ms, "
                  f"p90 {s['p90']:.2f} ms, max {s['max']:.1f} ms; CPU median {c['median']:.2f} ms, "
                  f"p90 {c['p90']:.2f} ms; {r.py4j_calls_per_tick:.1f} bridge calls "
                  f"and {r.chars_per_tick / 1000:.0f} k chars per tick; decisions {r.decisions}; "
                  f"errors {r.errors}", flush=True)
            results.append(r)
    return results


def compare_ticks(against: str, queries: int = 100, executors: int = 1000, warmup: int = 40,
                  ticks: int = 100) -> dict[str, Any]:
    """The tick of this tree and of the commit ``against``, alternating tick by tick in one process
    on the same samples: this machine's speed changes by 2x from one minute to the next, and only a
    comparison within the same seconds holds. ``against``'s package is extracted from git under
    another name (its modules import each other relatively)."""
    import io
    import tarfile

    with tempfile.TemporaryDirectory(prefix="sparkscale-against-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", against, "sparkscale_listener"],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        os.rename(Path(tmp) / "sparkscale_listener", Path(tmp) / "sparkscale_against")
        sys.path.insert(0, tmp)
        try:
            packages = (("this tree", "sparkscale_listener"), (against, "sparkscale_against"))
            arms = {name: _tick_arm(package, executors)[:2] for name, package in packages}
            cpu: dict[str, list[float]] = {name: [] for name in arms}
            actions: dict[str, list[str]] = {name: [] for name in arms}
            for k, sample in enumerate(tick_samples(queries, executors, warmup + ticks)):
                order = list(arms.items()) if k % 2 else list(reversed(arms.items()))
                for name, (autoscaler, feed) in order:
                    feed.set(sample)
                    start = time.thread_time()
                    made = autoscaler.step()
                    if k >= warmup:
                        cpu[name].append((time.thread_time() - start) * 1000.0)
                        actions[name].append(",".join(d.action for d in made))
            # A tick that failed is not comparable (the older package may not fit today's helpers).
            errors = {name: int(autoscaler.status()["errors"]) for name, (autoscaler, _) in arms.items()}
        finally:
            sys.path.remove(tmp)
            for module in [m for m in sys.modules if m.startswith("sparkscale_against")]:
                del sys.modules[module]
    mine, theirs = cpu["this tree"], cpu[against]
    ratios = [a / b for a, b in zip(mine, theirs, strict=True) if b > 0]
    return {"against": against, "queries": queries, "executors": executors, "ticks": ticks,
            "cpu": {name: summary(values) for name, values in cpu.items()}, "errors": errors,
            "same_decisions": actions["this tree"] == actions[against],
            "ratio_median": statistics.median(ratios),
            "ratio_mean": statistics.mean(mine) / statistics.mean(theirs)}


def _tick_arm(package: str, executors: int) -> tuple[Any, Feed, CountingSink]:
    """The benchmark's autoscaler (production defaults, the built-in checkers, the gauge and UI
    publishers over a counting sink, a recording realizer, the samples and the clock of a
    :class:`Feed`), built from ``package``'s own modules: this tree's, or a commit's for
    :func:`compare_ticks`."""
    def m(name: str) -> Any:
        return importlib.import_module(f"{package}.{name}")

    config = m("config.core").AutoscalerConfig.from_keys({"maxExecutors": str(max(2 * executors, 10)),
                                                          "initialExecutors": str(executors)})
    sink, feed = CountingSink(), Feed()
    events = m("observe.events")
    handler = type("IgnoringHandler", (events.EventHandler,), {"handle": lambda self, event: None})()
    dispatcher = events.EventDispatcher([handler])
    publishers: dict[str, Any] = dict(clock=lambda: feed.time, run_id="bench-run",
                                      gauges=m("observe.gauges").GaugePublisher(sink),
                                      observers=[m("observe.ui").UiPublisher(sink)])
    loop = m("control_loop")
    if hasattr(loop, "wire"):
        return loop.wire(config, feed, RecordingRealizer(), dispatcher, "bench", **publishers), feed, sink
    # A commit from before control_loop.wire (for --against): the same parts, assembled by hand.
    autoscaler = loop.Autoscaler(
        config, feed, m("evaluator").MicroBatchEvaluator(), m("policy").ScalingPolicy(), RecordingRealizer(),
        m("check.guard").RollbackGuard(config, m("check.loading").build_checkers(config)),
        dispatcher, m("state.store").InMemoryStateStore(), "bench", **publishers)
    return autoscaler, feed, sink


# ---------------------------------------------------------------------------------------------
# 1 + 2. The JVM bridge (a worker process: its driver JVM needs the benchmark class on its classpath)
# ---------------------------------------------------------------------------------------------


def compile_flood(out_dir: Path) -> Path:
    """javac the benchmark class against the running pyspark's jars and the bridge jar."""
    import pyspark

    from sparkscale_listener.spark import jars as bridge_jars

    jar = bridge_jars.bridge_jar()
    classpath = f"{Path(pyspark.__file__).parent / 'jars'}/*{os.pathsep}{jar}"
    subprocess.run(["javac", "-nowarn", "-cp", classpath, "-d", str(out_dir), str(JAVA_SOURCE)],
                   check=True)
    return jar


def bridge_worker(out: Path, quick: bool) -> None:
    from pyspark.sql import SparkSession

    from sparkscale_listener.collect.collector import SparkMetricCollector
    from sparkscale_listener.collect.progress import ProgressRecorder
    from sparkscale_listener.config.plugins import PluginContext
    from sparkscale_listener.spark.bridge import PLUGIN_CLASS, JvmBridge

    result: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="sparkscale-bench-") as tmp:
        classes = Path(tmp) / "classes"
        jar = compile_flood(classes)
        # Both on the system classpath: the benchmark class links to the bridge's classes, which
        # must then come from the same (parent) class loader as the plugin's.
        spark = (SparkSession.builder.master("local[1]").appName("sparkscale-bench-bridge")
                 .config("spark.driver.extraClassPath", f"{classes}{os.pathsep}{jar}")
                 .config("spark.plugins", PLUGIN_CLASS)
                 .config("spark.driver.memory", "2g")
                 .config("spark.ui.enabled", "false")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        try:
            jvm = spark.sparkContext._jvm
            flood: Any = jvm
            for part in FLOOD_CLASS.split("."):
                flood = getattr(flood, part)
            jsc = spark.sparkContext._jsc.sc()
            setup = json.loads(flood.setup(jsc, EXECUTORS, QUERIES, BATCHES, TASKS, WINDOW))
            result["setup"] = {k: v for k, v in setup.items() if k != "queryIds"}
            print(f"  pool: {setup['poolEvents']} events, {setup['poolTaskEnds']} task ends; "
                  f"{setup['executors']} executors, {QUERIES} queries; queue capacity {setup['capacity']}",
                  flush=True)
            seconds = 1.5 if quick else 3.0
            repeats = 2 if quick else 3

            def call(method: str, *args: Any) -> dict[str, Any]:
                value = json.loads(getattr(flood, method)(*args))
                print(f"  {method}{args}: {_flood_line(value)}", flush=True)
                return value

            call("saturate", "sparkscale", 1.0)  # JIT warm-up, not reported
            # 2. Snapshot cost with 1,000 executors and 100 queries (64 batches each, 1,000 running
            # tasks), before the paced floods: the task ends they drop leave their tasks running in
            # the listener (10-14 k of them, more than the 4,000 slots), which the snapshot then carries.
            call("startRunningTasks", EXECUTORS // QUERIES)
            result["snapshot_jvm"] = json.loads(flood.snapshotCost(50))
            result["capture_fresh"] = json.loads(flood.freshCaptureCost(50, EXECUTORS // QUERIES))
            result["snapshot_py"] = python_snapshot_cost(
                JvmBridge(spark.sparkContext), setup["queryIds"], SparkMetricCollector, PluginContext,
                ProgressRecorder, n=10 if quick else 30, between=lambda: flood.nextBatches(TASKS))
            result["gauges"] = py4j_gauge_cost(JvmBridge(spark.sparkContext), gauges=4 * QUERIES)
            print(f"  gauges: {result['gauges']}", flush=True)
            print(f"  snapshot (JVM): {result['snapshot_jvm']}", flush=True)
            print(f"  snapshot (Python): {result['snapshot_py']}", flush=True)

            result["handler"] = [call("handlerAlone", seconds) for _ in range(2)]
            result["noop"] = [call("saturate", "noop", seconds) for _ in range(repeats)]
            result["saturated"] = [call("saturate", "sparkscale", seconds) for _ in range(repeats)]
            result["bus"] = [call("saturate", "bus", seconds)]
            best = max(r["taskEndsPerSecond"] for r in result["saturated"])
            # Rates around the saturated one (where drops should start) and the target.
            rates = sorted({round(best * f, -3) for f in (0.1, 0.25, 0.5, 0.8, 1.1, 1.6)}
                           | {float(TARGET_TASK_ENDS_PER_S)})
            result["paced"] = [call("paced", "sparkscale", r, 2.0) for r in rates]
            # The same handlers behind a larger queue: does buffer, not speed, decide the drops?
            result["paced_big"] = [call("paced", f"big:{BIG_CAPACITY}", r, 2.0)
                                   for r in sorted({round(best * 0.5, -3), float(TARGET_TASK_ENDS_PER_S)})]
            # The control: a listener doing nothing, on a queue of its own of the default capacity.
            # Where it drops too, Spark's queue on this machine, not the bridge, decides the target.
            result["paced_noop"] = [call("paced", "noop", r, 2.0)
                                    for r in sorted({round(best * 0.5, -3), round(best * 0.8, -3),
                                                     float(TARGET_TASK_ENDS_PER_S)})]
        finally:
            spark.stop()
    out.write_text(json.dumps(result), encoding="utf-8")


def _flood_line(r: dict[str, Any]) -> str:
    if "taskEndsPerSecond" not in r:
        return json.dumps(r)
    text = (f"{r['taskEndsPerSecond'] / 1e3:.0f} k task ends/s ({r['eventsPerSecond'] / 1e3:.0f} k "
            f"events/s); {r['taskEndsPerCpuSecond'] / 1e3:.0f} k per consumer CPU-s "
            f"({r['cpuNsPerEvent']:.0f} ns/event)")
    if "dropped" in r:
        text += (f", posted {r['postedTaskEndsPerSecond'] / 1e3:.0f} k/s, dropped {r['dropped']}, "
                 f"max depth {r['maxQueueDepth']}")
    if "bridgeTasksFinished" in r:
        text += f", bridge counted {r['bridgeTasksFinished']} of {r['taskEnds']}"
    return text


def python_snapshot_cost(bridge: Any, query_ids: Sequence[str], collector_cls: Any, context_cls: Any,
                         recorder_cls: Any, n: int, between: Callable[[], Any]) -> dict[str, Any]:
    """The poll as the control loop does it: the py4j call returning the whole JSON, its parsing,
    ``JvmBridge.poll()`` (only the batches changed since its previous poll cross py4j) and the
    built-in collector's whole collect() (that poll, in which the JVM counts other jobs' tasks and
    the listener bus's dropped events, + the join with the progress of the same 100 queries, 64
    batches each).
    ``between`` runs before each timed poll and collect(), untimed: a new batch in every query, as
    a second of 1 s triggers brings."""
    jvm_class = bridge._bridge()  # the py4j class: time the call apart from the parsing
    call_ms, parse_ms, snapshot_ms, poll_ms, collect_ms = [], [], [], [], []
    text = ""
    for _ in range(n):
        t0 = time.perf_counter()
        text = jvm_class.snapshotJson()
        t1 = time.perf_counter()
        json.loads(text)
        t2 = time.perf_counter()
        bridge.snapshot()
        t3 = time.perf_counter()
        call_ms.append((t1 - t0) * 1000)
        parse_ms.append((t2 - t1) * 1000)
        snapshot_ms.append((t3 - t2) * 1000)
    bridge.poll()  # the first poll takes every batch; the timed ones what changed since the previous
    for _ in range(n):
        between()
        t0 = time.perf_counter()
        bridge.poll()
        poll_ms.append((time.perf_counter() - t0) * 1000)
    recorder = recorder_cls()
    now = time.time()
    for i, qid in enumerate(query_ids):
        recorder.record_started(qid, f"query-{i}", f"run-{i}", now)
        for b in range(BATCHES):
            # A start time per batch, one a second: the collector joins each batch with its tasks
            # and with the executors live when it ran (without it no batch record is built).
            started = datetime.fromtimestamp(now - BATCHES + b, timezone.utc)
            recorder.record_progress({
                "id": qid, "runId": f"run-{i}", "name": f"query-{i}", "batchId": b, "numInputRows": 1000,
                "timestamp": started.strftime("%Y-%m-%dT%H:%M:%S.") + f"{started.microsecond // 1000:03d}Z",
                "inputRowsPerSecond": 1000.0, "processedRowsPerSecond": 1200.0,
                "durationMs": {"triggerExecution": 800},
                "sources": [{"description": "bench", "startOffset": b * 1000, "endOffset": (b + 1) * 1000,
                             "latestOffset": (b + 1) * 1000 + 500, "numInputRows": 1000}]}, now)
    config = AutoscalerConfig()
    collector = collector_cls(context_cls(config, config.module("collector."), bridge=bridge,
                                          recorder=recorder))
    sample = None
    collector.collect(time.time())  # as above: the first poll of the collector's own bridge takes all
    for _ in range(n):
        between()
        t0 = time.perf_counter()
        sample = collector.collect(time.time())
        collect_ms.append((time.perf_counter() - t0) * 1000)
    assert sample is not None
    joined = sum(1 for q in sample.queries.values() if q.batch_busy_ms > 0)
    records = sum(len(q.recent_batches) for q in sample.queries.values())
    return {"n": n, "jsonChars": len(text), "executors": len(sample.cluster.executors),
            "queriesJoined": joined, "batchRecords": records, "py4jCallMs": summary(call_ms),
            "jsonLoadsMs": summary(parse_ms),
            "bridgeSnapshotMs": summary(snapshot_ms), "pollMs": summary(poll_ms),
            "collectMs": summary(collect_ms)}


def py4j_gauge_cost(bridge: Any, gauges: int, repeats: int = 5) -> dict[str, Any]:
    """What the gauge publisher's one py4j call a tick costs when ``gauges`` values changed (4 per
    query at 100 queries, as the tick section counts them), best and median of ``repeats``."""
    names = [f"bench.query-{i // 4}.gauge{i % 4}" for i in range(gauges)]
    totals = []
    for r in range(repeats):
        start = time.perf_counter()
        bridge.publish_gauges({name: float(r * gauges + i) for i, name in enumerate(names)}, [], "")
        totals.append((time.perf_counter() - start) * 1000.0)
    bridge.publish_gauges({}, names, "")
    return {"gauges": gauges, "totalMs": summary(totals)}


# ---------------------------------------------------------------------------------------------
# 4. Micro-batch latency with and without the autoscaler (a worker process per run)
# ---------------------------------------------------------------------------------------------

LATENCY_RATE, LATENCY_PARTITIONS, LATENCY_COST_MS = 20.0, 2, 2.0


def latency_worker(arm: str, out: Path, warmup: int, batches: int) -> None:
    """One driver: the query runs ``warmup`` + ``batches`` micro-batches; the latencies
    (triggerExecution) of the last ``batches`` are written to ``out``."""
    from pyspark.sql import SparkSession

    from sparkscale_listener import autoscaler
    from sparkscale_listener.testing.demo import StreamingJob, build_session, cluster_conf, wait_for

    result: dict[str, Any] = {"arm": arm}
    with tempfile.TemporaryDirectory(prefix="sparkscale-bench-") as tmp:
        workdir = Path(tmp)
        # Identical settings in both arms; spark.sparkscale.* keys are inert without the plugin.
        conf = cluster_conf(workdir, workers=2, extra={"spark.ui.enabled": "false",
                                                       "spark.eventLog.enabled": "false",
                                                       "spark.sparkscale.mode": "recommend"})
        ticks: list[float] = []
        if arm == "with":
            spark = build_session("sparkscale-bench-latency", conf)
            scaler = autoscaler(spark)
            step = scaler.step

            def timed_step() -> Any:  # the control loop's thread calls this instead
                start = time.perf_counter()
                try:
                    return step()
                finally:
                    ticks.append((time.perf_counter() - start) * 1000.0)

            scaler.step = timed_step  # type: ignore[method-assign]
        else:
            builder = SparkSession.builder.appName("sparkscale-bench-latency")
            for key, value in conf.items():
                builder = builder.config(key, value)
            spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        job = StreamingJob(spark, workdir, rows_per_second=LATENCY_RATE, partitions=LATENCY_PARTITIONS,
                           cost_ms=LATENCY_COST_MS, max_rows_per_batch=10_000).start()
        try:
            def progress() -> list[dict[str, Any]]:
                return [json.loads(p.json) for p in job.query.recentProgress]

            wait_for(lambda: any(p["batchId"] >= warmup + batches for p in progress()), 600,
                     poll_s=1.0, what=f"{warmup + batches} batches")
            by_batch = {p["batchId"]: p for p in progress()}
            kept = [by_batch[b] for b in sorted(by_batch) if warmup <= b < warmup + batches]
            result["latencies_ms"] = [float(p["durationMs"]["triggerExecution"]) for p in kept]
            result["rows"] = [int(p["numInputRows"]) for p in kept]
            # Where a batch's time went (latestOffset, queryPlanning, addBatch, walCommit, ...).
            result["durations_ms"] = [{k: float(v) for k, v in p["durationMs"].items()} for p in kept]
            if arm == "with":
                status = scaler.status()
                result["ticks_ms"] = ticks
                result["errors"] = status["errors"]
                result["mode"] = status["mode"]
        finally:
            job.stop()
            spark.stop()
    out.write_text(json.dumps(result), encoding="utf-8")


def run_worker(args: list[str], timeout_s: float) -> dict[str, Any]:
    """This script as a worker in its own process (its own driver JVM); its JSON result."""
    with tempfile.TemporaryDirectory(prefix="sparkscale-bench-") as tmp:
        out = Path(tmp) / "result.json"
        env = dict(os.environ, SPARK_LOCAL_IP=os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
        subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", *args, "--out", str(out)],
                       check=True, timeout=timeout_s, env=env)
        return json.loads(out.read_text(encoding="utf-8"))


def run_latency_section(pairs: int, warmup: int, batches: int) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for arm in latency_order(pairs):
        start = time.monotonic()
        r = run_worker([arm, "--warmup", str(warmup), "--batches", str(batches)], timeout_s=900)
        r["wall_s"] = time.monotonic() - start
        lat = r["latencies_ms"]
        extra = ""
        if arm == "with":
            extra = (f"; live ticks {len(r['ticks_ms'])}, median {statistics.median(r['ticks_ms']):.1f} ms"
                     if r["ticks_ms"] else "; no tick timed")
        print(f"  {arm:>7}: {len(lat)} batches, median {statistics.median(lat):.0f} ms, "
              f"p90 {percentile(lat, 0.9):.0f} ms ({r['wall_s']:.0f} s){extra}", flush=True)
        runs.append(r)
    withs = [r for r in runs if r["arm"] == "with"]
    withouts = [r for r in runs if r["arm"] == "without"]
    ratio = latency_ratio([(w["latencies_ms"], wo["latencies_ms"])
                           for w, wo in zip(withs, withouts, strict=True)])
    pairs_text = ", ".join(f"{x:.3f}" for x in ratio.ratios)
    print(f"  latency ratio with/without: median {ratio.median:.3f} (pairs {pairs_text}), "
          f"pooled {ratio.pooled:.3f}", flush=True)
    return {"runs": runs, "ratio": ratio}


# ---------------------------------------------------------------------------------------------
# Simulator speed (kept from the former bench_listener_overhead.py)
# ---------------------------------------------------------------------------------------------


def run_sim_section() -> dict[str, float]:
    from sparkscale_listener.sim import SimQuery, Simulation

    cfg = AutoscalerConfig(max_executors=50)
    queries = [SimQuery(f"q{i}", lambda t, i=i: 500.0 + 100 * i, cost_per_row=0.01) for i in range(5)]
    start = time.perf_counter()
    result = Simulation(cfg, queries, 4, seed=1).run(24 * 3600)
    elapsed = time.perf_counter() - start
    ticks = len(result.decisions)
    print(f"  simulator: a day of 5 queries ({ticks} ticks) in {elapsed:.1f} s", flush=True)
    return {"seconds": elapsed, "ticks": ticks}


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _load() -> str:
    """The 1-minute load average: on this shared machine, how much the neighbours ran."""
    return f"{os.getloadavg()[0]:.1f}"


def _speed() -> str:
    """Milliseconds of a fixed pure-Python loop (``sum(range(10**6))``, best of 3): the machine's
    speed, which changes here by 2x from one minute to the next at the same load average (20 ms on
    a fast minute of 2026-11-29, 40 on a slow one)."""
    import timeit

    return f"{min(timeit.repeat('sum(range(10**6))', number=1, repeat=3)) * 1000:.0f}"


def _k(x: float) -> str:
    return f"{x / 1e3:,.0f} k"


def _met(met: bool) -> str:
    return "**met**" if met else "**missed**"


def _ms(s: dict[str, float], key: str = "median") -> str:
    return f"{s[key]:.2f}"


def _bridge_row(what: str, runs: Sequence[dict[str, Any]]) -> str:
    rates = [r["taskEndsPerSecond"] for r in runs]
    return (f"| {what} | {_k(max(rates))} | {_k(statistics.median(rates))} | "
            f"{_k(max(r['eventsPerSecond'] for r in runs))} | "
            f"{_k(max(r['taskEndsPerCpuSecond'] for r in runs))} | "
            f"{min(r['cpuNsPerEvent'] for r in runs):.0f} |")


def render_report(results: dict[str, Any], meta: dict[str, Any]) -> str:
    """The markdown of ``benchmarks/results/cost.md`` from the sections that ran."""
    lines = ["# What running sparkscale costs", "",
             f"Written by `{REPORT_COMMAND}` ({meta['machine']}); a run of some sections replaces only "
             "theirs. Numbers from a shared machine (other Spark jobs ran beside it): repeated, best and "
             "median shown; compare runs on one machine only.", ""]
    loads: dict[str, str] = meta.get("loads", {})
    speeds: dict[str, str] = meta.get("speeds", {})

    def ran(section: str) -> str:
        return (f"_`{meta['command']}`, {meta['date']}; 1-minute load average {loads.get(section, '-')} "
                f"on {os.cpu_count()} cores, and `sum(range(10**6))` took {speeds.get(section, '-')} ms "
                "(the machine's speed: 20 on a fast minute), when the section started._")
    bridge = results.get("bridge")
    if bridge:
        ev_per_end = bridge["saturated"][0]["events"] / bridge["saturated"][0]["taskEnds"]
        clean, dropping = first_dropping_rate(bridge["paced"])
        lines += ["## 1. The JVM bridge's event throughput", "", ran("bridge"), "",
                  f"Synthetic micro-batch jobs ({QUERIES} queries x {BATCHES} batches x {TASKS} tasks, "
                  f"{EXECUTORS} executors; {ev_per_end:.2f} events per task end: start, end, and the "
                  "job/stage events) posted from a JVM thread to the `sparkscale` queue of a live "
                  "SparkContext (`local[1]`). Saturated: the poster waits when the queue is near full, so "
                  "the rate is the consumer's.", "",
                  "Wall-clock rates fall with the neighbours' load; the consumer's CPU time (the queue's "
                  "dispatch thread; the calling thread for the handlers alone) gives what one core of "
                  "its own absorbs.", "",
                  "| what | task ends/s best | median | events/s best | task ends per CPU-s best | "
                  "CPU ns per event |", "|---|---|---|---|---|---|",
                  _bridge_row("bridge listener on its queue", bridge["saturated"]),
                  _bridge_row("no-op listener on a queue of its own (Spark's queue cost alone)",
                              bridge["noop"]),
                  _bridge_row("bridge handlers alone, no queue (one thread)", bridge["handler"]),
                  _bridge_row("through `LiveListenerBus.post` (every queue of the app gets them)",
                              bridge["bus"]),
                  "",
                  "Paced (2 s each, queue capacity "
                  f"{bridge['paced'][0]['capacity']}):", "",
                  "| target task ends/s | posted | dropped | bridge counted / posted | max queue depth |",
                  "|---|---|---|---|---|"]
        for r in bridge["paced"]:
            lines.append(f"| {_k(r['targetTaskEndsPerSecond'])} | {_k(r['postedTaskEndsPerSecond'])} | "
                         f"{r['dropped']} | {r['bridgeTasksFinished']} / {r['taskEnds']} | "
                         f"{r['maxQueueDepth']} |")
        for r in bridge.get("paced_big", []):
            lines.append(f"| {_k(r['targetTaskEndsPerSecond'])} (fresh bridge listener, queue of "
                         f"{r['capacity']:,}) | {_k(r['postedTaskEndsPerSecond'])} | {r['dropped']} | "
                         f"{r['bridgeTasksFinished']} / {r['taskEnds']} | {r['maxQueueDepth']} |")
        for r in bridge.get("paced_noop", []):
            lines.append(f"| {_k(r['targetTaskEndsPerSecond'])} (no-op listener, queue of "
                         f"{r['capacity']:,}: Spark's queue alone) | {_k(r['postedTaskEndsPerSecond'])} | "
                         f"{r['dropped']} | - | {r['maxQueueDepth']} |")
        fastest = max(r["postedTaskEndsPerSecond"] for r in bridge["paced"])
        lines += ["", f"Highest paced rate with 0 dropped: {_k(clean) if clean else 'none'} task ends/s; "
                  f"drops from: {_k(dropping) if dropping else 'none up to ' + _k(fastest)} task ends/s. "
                  f"Target >= 1,000 k task ends/s with 0 dropped (the default queue): "
                  f"{_met(bool(clean) and clean >= TARGET_TASK_ENDS_PER_S)}.", ""]
        sj, sp = bridge["snapshot_jvm"], bridge["snapshot_py"]
        fresh = bridge.get("capture_fresh")
        lock_ms = (fresh or {"captureMs": sj["snapshotMs"]})["captureMs"]
        lock_met = _met(lock_ms["median"] < TARGET_LOCK_MS)
        collect_met = _met(sp["collectMs"]["median"] < TARGET_COLLECT_MS)
        running = f"{EXECUTORS} running tasks"
        if "runningTasksAtStart" in sj:  # (measured before the paced runs, which leave tasks running)
            running = (f"{sj['runningTasksAtStart']:,} running tasks at the first snapshot, "
                       f"{sj['runningTasksAtEnd']:,} at the last (measured before the paced runs, whose "
                       "dropped task ends leave their tasks running)")
        lines += ["## 2. Snapshot cost (1,000 executors, 100 queries)", "", ran("bridge"), "",
                  f"{sp['executors']} executors, {QUERIES} queries x {BATCHES} batches, "
                  f"{running}; the JSON is "
                  f"{sp['jsonChars'] / 1e3:,.0f} k characters.", "",
                  "| step | median ms | p90 ms | max ms |", "|---|---|---|---|",
                  f"| JVM: the listener's copy of its counters (holds its lock) | {_ms(sj['snapshotMs'])} | "
                  f"{_ms(sj['snapshotMs'], 'p90')} | {_ms(sj['snapshotMs'], 'max')} |",
                  *([f"| JVM: the same on a fresh listener ({fresh['runningTasks']:,} running tasks, none "
                     f"dropped) | {_ms(fresh['captureMs'])} | {_ms(fresh['captureMs'], 'p90')} | "
                     f"{_ms(fresh['captureMs'], 'max')} |"] if fresh else []),
                  f"| JVM: `snapshotJson()` (snapshot + Jackson) | {_ms(sj['snapshotJsonMs'])} | "
                  f"{_ms(sj['snapshotJsonMs'], 'p90')} | {_ms(sj['snapshotJsonMs'], 'max')} |",
                  f"| Python: py4j call returning the JSON | {_ms(sp['py4jCallMs'])} | "
                  f"{_ms(sp['py4jCallMs'], 'p90')} | {_ms(sp['py4jCallMs'], 'max')} |",
                  f"| Python: `json.loads` | {_ms(sp['jsonLoadsMs'])} | {_ms(sp['jsonLoadsMs'], 'p90')} | "
                  f"{_ms(sp['jsonLoadsMs'], 'max')} |",
                  f"| Python: `JvmBridge.snapshot()` (the two above) | {_ms(sp['bridgeSnapshotMs'])} | "
                  f"{_ms(sp['bridgeSnapshotMs'], 'p90')} | {_ms(sp['bridgeSnapshotMs'], 'max')} |",
                  *([f"| Python: `JvmBridge.poll()`: the batches changed since its previous poll (one "
                     f"new per query), merged | {_ms(sp['pollMs'])} | {_ms(sp['pollMs'], 'p90')} | "
                     f"{_ms(sp['pollMs'], 'max')} |"] if "pollMs" in sp else []),
                  f"| Python: the collector's whole `collect()` (its poll as above; "
                  f"{sp.get('batchRecords', 0):,} batch records joined with tasks and executors) | "
                  f"{_ms(sp['collectMs'])} | "
                  f"{_ms(sp['collectMs'], 'p90')} | {_ms(sp['collectMs'], 'max')} |",
                  "",
                  f"Targets: the listener's lock held < {TARGET_LOCK_MS:g} ms (on the fresh listener): "
                  f"{lock_met}; `collect()` < {TARGET_COLLECT_MS:g} ms: {collect_met} (medians).", ""]
        g = bridge.get("gauges")
        if g:
            lines += [f"Gauges: one `publish_gauges` py4j call with {g['gauges']} values (what a tick at "
                      f"100 queries sends when every value changed) took {g['totalMs']['min']:.1f} ms best, "
                      f"{g['totalMs']['median']:.1f} ms median.", ""]
    ticks = results.get("tick")
    if ticks:
        lines += ["## 3. Control-loop tick (scripted samples, pure Python)", "", ran("tick"), "",
                  "The real `Autoscaler.step` (production defaults, built-in checkers, gauge and UI "
                  "publishers over a counting sink, a recording realizer); 40 ticks fill the history, then "
                  f"{ticks[0].stats['n']} are timed, wall clock and the thread's CPU time (the machine is "
                  "shared: CPU time is the steadier figure). Bridge calls: what the gauge/UI publishers "
                  "would send over py4j per tick (not timed here; see the gauges line above). Each query "
                  "has a 1 s trigger, so every tick brings 10 new batches per query; every third tick "
                  "refits the models (the p90). The max is a tick that ran one of Python's full garbage "
                  "collections (about 100 ms here, over the whole process's objects, the benchmark's "
                  "scripted samples included).", "",
                  "| queries | executors | median ms | p90 ms | max ms | CPU median ms | CPU p90 ms | "
                  "bridge calls/tick |", "|---|---|---|---|---|---|---|---|"]
        for r in ticks:
            s, c = r.stats, r.cpu_stats
            lines.append(f"| {r.queries} | {r.executors} | {s['median']:.2f} | {s['p90']:.2f} | "
                         f"{s['max']:.1f} | {c['median']:.2f} | {c['p90']:.2f} | "
                         f"{r.py4j_calls_per_tick:.1f} |")
        largest = max(ticks, key=lambda r: (r.queries, r.executors))
        cpu = largest.cpu_stats["median"]
        lines += ["", f"Target: < {TARGET_TICK_MS:.0f} ms of CPU at 100 queries / 1,000 executors: "
                  f"{_met(cpu < TARGET_TICK_MS)} ({cpu:.1f} ms median at {largest.queries} / "
                  f"{largest.executors:,}).", ""]
    latency = results.get("latency")
    if latency:
        ratio: RatioSummary = latency["ratio"]
        runs = latency["runs"]
        lines += ["## 4. Micro-batch latency with / without the autoscaler (recommend mode)", "",
                  ran("latency"), "",
                  f"One query ({LATENCY_RATE:.0f} rows/s, {LATENCY_PARTITIONS} partitions, "
                  f"{LATENCY_COST_MS:.0f} ms per row, 1 s trigger, JSON file sink) on "
                  "`local-cluster[2,1,1024]`; each run its own driver process, alternating "
                  f"({' '.join('A' if r['arm'] == 'with' else 'B' for r in runs)}; A = with), "
                  f"{len(runs[0]['latencies_ms'])} batches per run after warm-up; latency = the batch's "
                  "`triggerExecution`. The autoscaler ticks every 2 s (the demo's interval, 5x the default).",
                  "", "| run | arm | median ms | p90 ms | live tick median ms |", "|---|---|---|---|---|"]
        for i, r in enumerate(runs):
            lat = r["latencies_ms"]
            tick = f"{statistics.median(r['ticks_ms']):.1f}" if r.get("ticks_ms") else "-"
            lines.append(f"| {i + 1} | {r['arm']} | {statistics.median(lat):.0f} | "
                         f"{percentile(lat, 0.9):.0f} | {tick} |")
        lines += ["", f"Ratio with/without per pair: {', '.join(f'{x:.3f}' for x in ratio.ratios)}; "
                  f"median {ratio.median:.3f} (spread {ratio.low:.3f} - {ratio.high:.3f}); pooled medians "
                  f"{ratio.pooled:.3f}. Target: within {TARGET_LATENCY_RATIO:.0%}: {ratio.verdict()}.", ""]
    sim = results.get("sim")
    if sim:
        lines += ["## 5. Simulator", "", ran("sim"), "",
                  f"A simulated day of 5 queries ({sim['ticks']} ticks) in {sim['seconds']:.1f} s.", ""]
    return "\n".join(lines)


def _blocks(text: str) -> tuple[str, dict[str, str]]:
    """The preamble and the "## N." blocks of a report, keyed by their number."""
    parts = text.split("\n## ")
    blocks = {}
    for part in parts[1:]:
        blocks[part.split(" ", 1)[0]] = "## " + part.rstrip("\n") + "\n"
    return parts[0].rstrip("\n") + "\n", blocks


def merge_report(old: str, new: str) -> str:
    """``new`` with the sections it lacks taken from ``old``: running one section keeps the others."""
    _, old_blocks = _blocks(old)
    preamble, new_blocks = _blocks(new)
    merged = {**old_blocks, **new_blocks}
    return preamble + "".join("\n" + merged[k] for k in sorted(merged))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", help=f"any of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--pairs", type=int, default=3, help="with/without pairs of latency runs")
    parser.add_argument("--warmup", type=int, default=5, help="batches skipped per latency run")
    parser.add_argument("--batches", type=int, default=20, help="batches measured per latency run")
    parser.add_argument("--quick", action="store_true", help="shorter bridge runs")
    parser.add_argument("--against", metavar="REV",
                        help="only compare the tick at 100 queries / 1,000 executors with commit REV's, "
                             "alternating in one process (prints; writes no report)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        if args.worker == "bridge":
            bridge_worker(args.out, args.quick)
        else:
            latency_worker(args.worker, args.out, args.warmup, args.batches)
        return 0
    if args.against:
        print(f"== tick against {args.against} (load average {_load()}, sum(range(10**6)) {_speed()} ms)",
              flush=True)
        compared = compare_ticks(args.against)
        for name, c in compared["cpu"].items():
            print(f"  {name}: CPU median {c['median']:.1f} ms, p90 {c['p90']:.1f} ms; "
                  f"{compared['errors'][name]} failed ticks")
        if any(compared["errors"].values()):
            print("  not comparable: an arm's ticks failed (its errors are in the log above)")
            return 1
        print(f"  the same decisions in every tick: {compared['same_decisions']}")
        print(f"  this tree / {args.against}: median of the per-tick ratios {compared['ratio_median']:.3f}, "
              f"ratio of the means {compared['ratio_mean']:.3f} ({compared['ticks']} ticks each)")
        return 0
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    started = time.monotonic()
    results: dict[str, Any] = {}
    loads: dict[str, str] = {}
    speeds: dict[str, str] = {}
    for section in args.sections or SECTIONS:
        loads[section], speeds[section] = _load(), _speed()
        print(f"== {section} (load average {loads[section]}, sum(range(10**6)) {speeds[section]} ms)",
              flush=True)
        if section == "bridge":
            results["bridge"] = run_worker(["bridge", *(["--quick"] if args.quick else [])], timeout_s=900)
        elif section == "tick":
            results["tick"] = run_tick_section()
        elif section == "latency":
            results["latency"] = run_latency_section(args.pairs, args.warmup, args.batches)
        elif section == "sim":
            results["sim"] = run_sim_section()
    given = list(sys.argv[1:] if argv is None else argv)
    meta: dict[str, Any] = {"command": " ".join([".venv/bin/python benchmarks/bench_cost.py", *given]),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
            "loads": loads, "speeds": speeds}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    old = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
    RESULTS.write_text(merge_report(old, render_report(results, meta)), encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)} in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
