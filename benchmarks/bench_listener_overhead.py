"""What the autoscaler costs the job: run on purpose (`make bench`), prints its numbers.

1. Listener overhead: a batch job of many tiny JVM tasks on local-cluster, with and without the
   bridge plugin (same JVM settings), best of several runs -> extra driver time per task.
2. Control-loop tick: snapshot + progress + evaluation + decision, timed over many ticks on a
   running streaming query.
3. Evaluator alone on simulated series (pure Python).

Numbers depend on the machine; compare runs on the same machine only.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

TASKS = 4000
RUNS = 3


def tiny_tasks_seconds(spark) -> float:
    # JVM-only tasks (no Python worker), so the listener's share of driver time is visible.
    best = float("inf")
    for _ in range(RUNS):
        start = time.perf_counter()
        spark.range(0, TASKS, 1, TASKS).count()
        best = min(best, time.perf_counter() - start)
    return best


def session(with_bridge: bool, workdir: Path):
    from pyspark.sql import SparkSession

    from sparkscale_listener import autoscale

    builder = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("bench")
               .config("spark.ui.enabled", "false").config("spark.executor.memory", "512m"))
    if with_bridge:
        builder = builder.config("spark.sparkscale.mode", "recommend")
        return autoscale(builder)
    return builder.getOrCreate()


def bench_listener() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        # The bridge run goes first: the driver JVM needs the jar on its classpath from the start.
        for with_bridge in (True, False):
            spark = session(with_bridge, Path(tmp))
            spark.sparkContext.setLogLevel("ERROR")
            spark.range(0, 100, 1, 10).count()  # warm up executors
            results[with_bridge] = tiny_tasks_seconds(spark)
            spark.stop()
    extra = (results[True] - results[False]) / TASKS * 1000.0
    print(f"listener: {TASKS} tiny tasks, best of {RUNS}: without bridge {results[False]:.2f}s, "
          f"with bridge {results[True]:.2f}s -> {extra:+.3f} ms per task")


def bench_tick() -> None:
    from sparkscale_listener import autoscaler
    from sparkscale_listener.testing.demo import StreamingJob, build_session, cluster_conf, wait_for

    with tempfile.TemporaryDirectory() as tmp:
        conf = cluster_conf(Path(tmp), workers=2, extra={"spark.ui.enabled": "false",
                                                         "spark.sparkscale.mode": "recommend"})
        spark = build_session("bench-tick", conf)
        scaler = autoscaler(spark)
        job = StreamingJob(spark, Path(tmp), rows_per_second=100).start()
        try:
            wait_for(lambda: scaler.status()["last_decision"], 180, what="the first decision")
            times = []
            for _ in range(50):
                start = time.perf_counter()
                scaler.step()
                times.append((time.perf_counter() - start) * 1000.0)
            print(f"control-loop tick on a live query: median {statistics.median(times):.1f} ms, "
                  f"p90 {sorted(times)[int(0.9 * len(times))]:.1f} ms over {len(times)} ticks")
        finally:
            job.stop()
            spark.stop()


def bench_evaluator() -> None:
    from sparkscale_listener.config import AutoscalerConfig
    from sparkscale_listener.testing.sim import SimQuery, Simulation

    cfg = AutoscalerConfig(max_executors=50)
    queries = [SimQuery(f"q{i}", lambda t, i=i: 500.0 + 100 * i, cost_per_row=0.01) for i in range(5)]
    start = time.perf_counter()
    result = Simulation(cfg, queries, 4, seed=1).run(24 * 3600)
    elapsed = time.perf_counter() - start
    ticks = len(result.decisions)
    print(f"simulator: a day of 5 queries ({ticks} ticks) in {elapsed:.1f}s "
          f"-> {elapsed / max(ticks, 1) * 1000:.2f} ms per tick incl. the fluid model")


if __name__ == "__main__":
    which = sys.argv[1:] or ["evaluator", "listener", "tick"]
    for name in which:
        {"evaluator": bench_evaluator, "listener": bench_listener, "tick": bench_tick}[name]()
