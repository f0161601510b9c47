"""Real Spark, side by side: sparkscale, a static cluster sized for the peak, Spark's own dynamic
allocation and the occupancy rule (as sparkscale's evaluator, ``alternatives.OccupancyEvaluator``),
on the same query under the same arrivals, on a real standalone cluster.

Run on purpose: ``.venv/bin/python benchmarks/bench_real_spark.py`` (about 35 minutes on a 2-core
machine; ``--quick`` for a smoke run of about 12 minutes, ``--cost`` to skip the calibration run,
``--repeat N`` for N rounds of the policies, their order rotated each round, ``--render`` to redraw
the report from its JSON). It starts
a standalone Master and two Workers (3 one-core executor slots each) as daemons on loopback, then,
one after another, one driver process per (load, policy): the project's controllable test source
(``sparkscale_listener.testing.source``) whose arrival rate follows a fixed schedule written into
its control file, ``costMs`` of sleep per row (I/O-bound enrichment: on a 2-core machine CPU-bound
work could not get faster with a third executor), a JSON file sink, exactly once. Every figure is
computed afterwards from the run's Spark event log alone (executors added/removed, task ends, query
progress) and written to ``benchmarks/results/real_spark.md`` with one PNG per load.

The loads are compressed: a "day" lasts minutes. sparkscale keeps its defaults except the
durations that only make sense on a timescale of hours (``SPARKSCALE_COMPRESSED``), and dynamic
allocation's idle timeout is shortened by the same factor as sparkscale's scale-down interval.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

# figures.py, runner.py and real_spark_figures.py sit next to this file; benchmarks/ is a folder of
# scripts, not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from figures import OTHER_TARGET, other_target
from real_spark_figures import (  # noqa: F401 (the unit tests read these names from here)
    ACTION_MERGE_S,
    BACKLOG_THRESHOLD_S,
    CORES_PER_WORKER,
    MAX_EXECUTORS,
    SCALE_DOWN_INTERVAL_S,
    UTILIZATION_TARGET,
    WORKERS,
    Load,
    RunLog,
    busy_slot_seconds,
    day_load,
    fall_load,
    merged_actions,
    oracle_executors,
    parse_event_log,
    rate_at,
    rows_between,
    rows_processed,
    run_figures,
    source_offset,
    step_load,
    timeline,
)
from runner import (
    RESULT_FILE,
    RESULTS,
    VENV_BIN,
    Processes,
    dynamic_allocation_conf,
    epoch,
    fmt,
    free_port,
    median_range,
    read_event_lines,
    rotated,
    run_application,
    settle,
    spark_env,
    sparkscale_conf,
    stop_on_sigterm,
    write_report,
)

# The query: every row sleeps COST_MS (a call to a service); 6 tasks per micro-batch, so up to 6
# slots can be busy; a read limit keeps a backlog in the source, where the progress reports it.
COST_MS = 15.0
PARTITIONS = 6
MAX_ROWS_PER_BATCH = 300
TRIGGER_S = 1.0

# sparkscale's defaults that are durations on an hours-long scale, shortened for a day squeezed
# into minutes. Everything else (utilization band, max factors, checkers, provisioning, ...) is
# the default. key: (default, used here, why)
SPARKSCALE_COMPRESSED: dict[str, tuple[str, str, str]] = {
    "interval": ("10s", "2s", "a tick per 2 triggers; 10 s is a 20th of the compressed day"),
    "metricsWindow": ("60s", "12s", "12 one-second batches: the cost fit needs at least 8"),
    "stabilizationInterval": ("30s", "3s", "/10: a batch or two on the new executors"),
    "scaleDownInterval": ("300s", "30s", "/10: 300 s is longer than the whole step load"),
    "catchUpDuration": ("300s", "30s", "/10: a backlog worked off within the load's phases"),
    "backlogThreshold": ("60s", "6s", "/10: also the lag threshold of the figures"),
}
# Spark's default spark.dynamicAllocation.executorIdleTimeout is 60 s: /10, as scaleDownInterval.
DA_IDLE_TIMEOUT = "6s"
# The occupancy rule (``ceil(executors x batch time / trigger)`` outside [0.5, 1.0], a user's
# five lines) runs as sparkscale's evaluator, everything else of sparkscale as is: only the sizing
# differs. It looks every 60 s /10, like the simulator's rule every 60 s.
OCCUPANCY = "occupancy"
OCCUPANCY_CONF = {"spark.sparkscale.evaluator": "alternatives.OccupancyEvaluator",
                  "spark.sparkscale.evaluator.interval": "6s"}
POLICIES = ("sparkscale", "static-peak", "dynamic-allocation", OCCUPANCY)
# Also accepted (not run by default): sparkscale at another utilization.target, "sparkscale-u0.8"
# (figures.other_target).


def runs_sparkscale(policy: str) -> bool:
    """Whether the run's session is built with sparkscale (its own policies and the occupancy rule)."""
    return policy in ("sparkscale", OCCUPANCY) or other_target(policy) is not None



@dataclass
class Cluster:
    master_url: str
    web_url: str


def start_cluster(procs: Processes, work: Path, env: Mapping[str, str]) -> Cluster:
    work.mkdir(parents=True, exist_ok=True)
    spark_class = str(VENV_BIN / "spark-class")
    port, web = free_port(), free_port()
    daemon_env = {**env, "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "worker")}
    procs.start([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(web)], work / "master.log", daemon_env)
    master_url = f"spark://127.0.0.1:{port}"
    for i in range(WORKERS):
        worker_dir = work / f"worker{i}"
        worker_dir.mkdir(parents=True, exist_ok=True)
        procs.start([spark_class, "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                     "--cores", str(CORES_PER_WORKER), "--memory", "2g", "--webui-port", str(free_port()),
                     "--work-dir", str(worker_dir)], work / f"worker{i}.log", daemon_env)
    web_url = f"http://127.0.0.1:{web}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{web_url}/json/", timeout=5) as response:
                if json.load(response).get("aliveworkers", 0) >= WORKERS:
                    return Cluster(master_url, web_url)
        except OSError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"the {WORKERS} Workers did not register with the Master within 120 s")


# ----------------------------------------------------------------------------- one run (driver)
def policy_conf(policy: str, static_executors: int, initial_executors: int = 1) -> dict[str, str]:
    if runs_sparkscale(policy):
        # Start where dynamic allocation starts (its initialExecutors, by default minExecutors = 1)
        # rather than with every core the Master hands a new application; the cluster's size is the max.
        conf = sparkscale_conf(MAX_EXECUTORS, initial_executors,
                               {key: used for key, (_, used, _) in SPARKSCALE_COMPRESSED.items()})
        target = other_target(policy)
        if target is not None:
            from sparkscale_listener.config.core import AutoscalerConfig

            scale_up_above = max(target, AutoscalerConfig().utilization_max)
            conf.update({"spark.sparkscale.utilization.target": f"{target:g}",
                         "spark.sparkscale.utilization.max": f"{scale_up_above:g}"})
        return {**conf, **OCCUPANCY_CONF} if policy == OCCUPANCY else conf
    if policy == "static-peak":
        return {"spark.cores.max": str(static_executors), "spark.dynamicAllocation.enabled": "false"}
    if policy == "dynamic-allocation":
        return dynamic_allocation_conf(MAX_EXECUTORS, initial_executors, DA_IDLE_TIMEOUT)
    raise ValueError(f"unknown policy {policy!r}")


COLD_START_RATE = 1.0  # rows/s until the first batches ran (see warm_up)


def warm_up(query: Any, control: Path, rate: float, min_s: float, deadline_s: float = 300.0) -> None:
    """Get past the cold start before the measured load. On a loaded 2-core machine the first
    batch (Python workers, the source's first plan) takes half a minute: arrivals at full rate
    would pile up a backlog that every policy then answers with all the executors it can get.
    So the query starts at a trickle; once 3 batches ran the first rate of the load comes in for
    at least ``min_s`` (the policies settle on it) and until the backlog is at most 2 s of input."""
    from sparkscale_listener.testing import source as testing_source

    started = time.monotonic()
    loaded: float | None = None
    while time.monotonic() - started < deadline_s:
        time.sleep(1.0)
        if not query.isActive:
            raise RuntimeError(f"the query stopped: {query.exception()}")
        progress = query.lastProgress or {}
        if loaded is None:
            if progress.get("batchId", 0) >= 3:
                testing_source.set_rate(str(control), rate)
                loaded = time.monotonic()
            continue
        source = (progress.get("sources") or [{}])[0]
        latest, end = source_offset(source.get("latestOffset")), source_offset(source.get("endOffset"))
        if (time.monotonic() - loaded >= min_s and latest is not None and end is not None
                and latest - end <= 2 * rate):
            return
    print(f"warning: warm-up not settled after {deadline_s:.0f}s", flush=True)


def driver_main(spec_path: Path) -> int:
    """One application: start the query, warm up, play the schedule, drain, check the sink."""
    spec = json.loads(spec_path.read_text())
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from sparkscale_listener import autoscale
    from sparkscale_listener.testing import source as testing_source
    from sparkscale_listener.testing.demo import exactly_once, quiet_executor_removal_noise

    work = Path(spec["work"])
    builder = SparkSession.builder.appName(spec["app"])
    for key, value in spec["conf"].items():
        builder = builder.config(key, value)
    spark = autoscale(builder) if runs_sparkscale(spec["policy"]) else builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    quiet_executor_removal_noise(spark)
    schedule = [tuple(x) for x in spec["schedule"]]
    control = work / "rate"
    testing_source.set_rate(str(control), COLD_START_RATE)
    testing_source.register(spark)
    query = None
    try:
        stream = (spark.readStream.format(testing_source.NAME)
                  .option("controlFile", str(control)).option("rowsPerSecond", str(COLD_START_RATE))
                  .option("maxRowsPerBatch", str(MAX_ROWS_PER_BATCH)).option("partitions", str(PARTITIONS))
                  .option("costMs", str(COST_MS)).option("costMode", "sleep").load())
        query = (stream.writeStream.format("json").queryName("bench")
                 .option("path", str(work / "out")).option("checkpointLocation", str(work / "checkpoint"))
                 .trigger(processingTime=f"{TRIGGER_S:g} seconds").start())
        warm_up(query, control, schedule[0][1], spec["warmup_s"])
        t0 = time.time()
        for offset, rate in schedule:
            # Each change is stamped with its scheduled time, so arrivals integrate exactly over
            # the schedule however late this loop wakes.
            time.sleep(max(0.0, t0 + offset - time.time()))
            testing_source.set_rate(str(control), rate, at=t0 + offset)
            if not query.isActive:
                raise RuntimeError(f"the query stopped: {query.exception()}")
        time.sleep(max(0.0, t0 + spec["duration_s"] - time.time()))
        t_end = time.time()
        testing_source.set_rate(str(control), 0.0, at=t_end)
        # Drain: the arrivals stopped; wait until a batch planned after that has read everything.
        deadline = time.monotonic() + spec["drain_s"]
        drained = False
        while time.monotonic() < deadline and not drained:
            time.sleep(1.0)
            progress = query.lastProgress or {}
            source = (progress.get("sources") or [{}])[0]
            latest, end = source.get("latestOffset"), source.get("endOffset")
            drained = (progress.get("timestamp") is not None and epoch(progress["timestamp"]) > t_end + 0.5
                       and latest is not None and latest == end)
        last_source = ((query.lastProgress or {}).get("sources") or [{}])[0]
        rows_in = source_offset(last_source.get("endOffset")) or 0
        query.stop()
        sink = spark.read.schema(testing_source.SCHEMA).json(str(work / "out"))  # through the sink's log
        ids = [r.id for r in sink.select("id").collect()]
        result = {"t0": t0, "t_end": t_end, "app_id": spark.sparkContext.applicationId, "drained": drained,
                  "rows_in": rows_in, "rows_out": len(ids), "distinct_out": len(set(ids)),
                  "exactly_once": exactly_once(ids) and len(ids) == rows_in}
        (work / RESULT_FILE).write_text(json.dumps(result))
        return 0
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.stop()


@dataclass
class RunResult:
    load: str
    policy: str
    t0: float
    rows_in: int
    rows_out: int
    exactly_once: bool
    drained: bool
    wall_s: float
    figures: dict[str, float]
    timeline: dict[str, Any]
    arrived: int = -1  # rows the source generated in all (rows in falls short when not drained)
    run: int = 1  # the round (policies interleaved, one run of each per round)
    load_avg: str = ""  # the machine's 1-minute load average at the run's start / end


def run_one(procs: Processes, cluster: Cluster, env: Mapping[str, str], work: Path, load: Load, policy: str,
            static_executors: int, warmup_s: float,
            initial_executors: int = 1) -> tuple[RunLog, dict[str, Any]]:
    """One driver process for (load, policy); returns its event log and result."""
    work.mkdir(parents=True)
    (work / "events").mkdir()
    conf = {
        "spark.master": cluster.master_url, "spark.executor.cores": "1", "spark.executor.memory": "512m",
        "spark.driver.memory": "1g", "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(PARTITIONS),
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": str(work / "events"),
        "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false",
        **policy_conf(policy, static_executors, initial_executors),
    }
    spec = {"app": f"bench-{load.name}-{policy}", "policy": policy, "conf": conf, "work": str(work),
            "schedule": load.schedule, "duration_s": load.duration_s, "warmup_s": warmup_s,
            "drain_s": 60.0}
    (work / "spec.json").write_text(json.dumps(spec))
    result = run_application(procs, [sys.executable, str(Path(__file__).resolve()), "--driver",
                                     str(work / "spec.json")], work, env,
                             warmup_s + load.duration_s + 300, spec["app"])
    return parse_event_log(read_event_lines(work / "events")), result


# ------------------------------------------------------------------------------------- report
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("executor_s", "executor-s", "{:.0f}"),
    ("executor_s_vs_oracle", "vs oracle", "{:.2f}"),
    ("mean_executors", "mean exec", "{:.2f}"),
    ("lag_over_threshold_share", "lag > 6 s", "{:.1%}"),
    ("max_lag_s", "max lag s", "{:.1f}"),
    ("actions", "actions", "{:.0f}"),
    ("flaps", "flaps", "{:.0f}"),
    ("failed_tasks", "failed tasks", "{:.0f}"),
    ("slot_s_per_row", "slot-s/row", "{:.4f}"),
)



def markdown(results: Sequence[RunResult], loads: Sequence[Load], meta: Mapping[str, Any]) -> str:
    quick = " --quick" if meta["quick"] else ""
    calibration = meta["calibration"]
    lines = ["# Real Spark, side by side", "",
             f"Generated by `.venv/bin/python benchmarks/bench_real_spark.py{quick}"
             f"{' ' + meta['options'] if meta.get('options') else ''}` on {meta['date']} "
             f"in {meta['wall_min']:.1f} min (pyspark {meta['spark']}, {os.cpu_count()} cores; the "
             "machine's 1-minute load average at each run's start / end is beside its figures: a "
             "figure from a busy machine is noise, not a result; each run waited for it to fall "
             f"to {meta.get('settle_load', 'n/a')} first, for at most 3 min).", "",
             f"Standalone Master + {WORKERS} Workers x {CORES_PER_WORKER} cores on loopback, 1-core 512 MB "
             f"executors, at most {MAX_EXECUTORS}. Query: the project's test source, {PARTITIONS} "
             f"partitions, `maxRowsPerBatch={MAX_ROWS_PER_BATCH}`, {COST_MS:g} ms sleep per row, JSON "
             f"file sink, {TRIGGER_S:g} s trigger. Every figure is from the event log (executors "
             "added/removed, task ends, query progress) over the load's window only (warm-up and drain "
             "excluded).", "",
             f"Measured cost: **{meta['cost_s_per_row']:.4f} slot-s per row** ("
             + (f"calibration run on {calibration['executors']} static executors at "
                f"{calibration['rate']:g} rows/s" if calibration["executors"]
                else "given with `--cost`, from an earlier calibration run")
             + ": task slot time launch->finish / rows of the batches, after warm-up). Oracle = fewest "
             "executors with "
             f"`noise-free rate x cost / {UTILIZATION_TARGET}` slots; static-peak = the oracle at the "
             f"peak = **{meta['static_executors']} executors**.", ""]
    for load in loads:
        rows = [r for r in results if r.load == load.name]
        if not rows:
            continue
        lines += [f"## {load.title} ({load.duration_s:.0f} s)", "",
                  "| run | policy | load avg | " + " | ".join(c[1] for c in COLUMNS)
                  + " | rows in / out, exactly once |",
                  "|---:|---|---|" + "---:|" * len(COLUMNS) + "---|"]
        for r in rows:
            cells = [fmt(r.figures.get(key, math.nan), pattern) for key, _, pattern in COLUMNS]
            rows_note = f"{r.rows_in} / {r.rows_out}, {'yes' if r.exactly_once else 'NO'}"
            if not r.drained:
                arrived = f" of {r.arrived}" if r.arrived >= 0 else ""
                rows_note += f" (backlog not worked off{arrived} in 60 s after the load)"
            lines.append(f"| {r.run} | {r.policy} | {r.load_avg or 'n/a'} | " + " | ".join(cells)
                         + f" | {rows_note} |")
        # Each policy's runs, per headline figure, sorted: their median and range (one run: its figures).
        runs = {policy: {key: sorted(r.figures.get(key, math.nan) for r in rows if r.policy == policy)
                         for key, _, _ in COLUMNS[:5]}
                for policy in dict.fromkeys(r.policy for r in rows)}
        if len({r.run for r in rows}) > 1:
            lines += ["", "Median (range) over the runs:", ""]
            for policy, values in runs.items():
                lines.append(f"- {policy}: " + "; ".join(
                    f"{label} {median_range(values[key], pattern)}" for key, label, pattern in COLUMNS[:5]))
        oracle = rows[0].figures.get("oracle_executor_s", math.nan)
        lines += ["", f"Oracle: {oracle:.0f} executor-s. ![{load.name}](real_spark_{load.name}.png)", ""]
        by = {policy: {key: statistics.median(v) for key, v in values.items()}
              for policy, values in runs.items()}
        ours = [p for p in by if p == "sparkscale" or other_target(p) is not None]
        for mine in ours:
            s = by[mine]
            for other in ("static-peak", "dynamic-allocation", OCCUPANCY):
                if other in by and by[other]["executor_s"] > 0:
                    lines.append(f"- {mine} / {other} executor-seconds, medians: "
                                 f"**{s['executor_s'] / by[other]['executor_s']:.2f}x** "
                                 f"(max lag {s['max_lag_s']:.1f} s vs {by[other]['max_lag_s']:.1f} s)")
        if ours:
            lines.append("")
    lines += ["## What was shortened for the compressed timescale", "",
              "| sparkscale key | default | here | why |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {d} | {u} | {why} |" for k, (d, u, why) in SPARKSCALE_COMPRESSED.items()]
    sized = [load.name for load in loads if load.start_sized]
    lines += ["", "Also `initialExecutors=1` (dynamic allocation's start"
              + (f"; for the {', '.join(sized)} load, sparkscale, the occupancy rule and dynamic allocation "
                 "alike start on the oracle's executors for its first rate" if sized else "")
              + ") and `maxExecutors="
              f"{MAX_EXECUTORS}` (the cluster). Dynamic allocation: `executorIdleTimeout={DA_IDLE_TIMEOUT}` "
              "(default 60 s, /10 like `scaleDownInterval`), `minExecutors=1`, `maxExecutors="
              f"{MAX_EXECUTORS}`, shuffle tracking on, every other setting its default. Occupancy: "
              "sparkscale with the same keys and its evaluator replaced by the occupancy rule ("
              + ", ".join(f"`{k.removeprefix('spark.sparkscale.')}={v}`" for k, v in OCCUPANCY_CONF.items())
              + ": every 6 s, `ceil(executors x batch time / trigger)` when outside [0.5, 1.0]).", "",
              "Actions: executor-count changes, consecutive ones in one direction less than "
              f"{ACTION_MERGE_S:g} s apart merged; flaps: opposite actions less than "
              f"{SCALE_DOWN_INTERVAL_S:g} s apart. Lag: how long the oldest row not yet committed has "
              "waited (from the source's offsets and the sink's commits).", ""]
    return "\n".join(lines)


def plot(results: Sequence[RunResult], load: Load, cost_s_per_row: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if r.load == load.name and r.run == 1]
    fig, axes = plt.subplots(len(rows), 1, figsize=(7.5, 2.1 * len(rows)), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], rows, strict=True):
        t, tl = r.timeline["t"], r.timeline
        oracle = [oracle_executors(rate_at(load.clean, x), cost_s_per_row) for x in t]
        ax.fill_between(t, [v / 40.0 for v in tl["load"]], step="post", color="0.85",
                        label="load (rows/s / 40)")
        ax.step(t, oracle, where="post", color="0.4", linestyle="--", linewidth=1, label="oracle")
        ax.step(t, tl["executors"], where="post", color="tab:blue", linewidth=1.6, label="executors")
        ax.set_ylim(0, MAX_EXECUTORS + 0.5)
        ax.set_ylabel("executors")
        ax.set_title(f"{r.policy}: {r.figures['executor_s']:.0f} executor-s, max lag "
                     f"{r.figures['max_lag_s']:.1f} s", fontsize=9)
        lag_ax = ax.twinx()
        lag_ax.plot(t, tl["lag_s"], color="tab:red", linewidth=0.9, label="lag (oldest row waiting, s)")
        lag_ax.axhline(BACKLOG_THRESHOLD_S, color="tab:red", linestyle=":", linewidth=0.8)
        lag_ax.set_ylim(0, max(2 * BACKLOG_THRESHOLD_S, max(tl["lag_s"] or [0]) * 1.1))
        lag_ax.set_ylabel("lag s", color="tab:red")
    lines0, labels0 = axes[0, 0].get_legend_handles_labels()
    axes[0, 0].legend(lines0, labels0, loc="upper left", fontsize=7, ncol=3)
    axes[-1, 0].set_xlabel(f"seconds ({load.title})")
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)


# --------------------------------------------------------------------------------------- main
def calibrate(procs: Processes, cluster: Cluster, env: Mapping[str, str], work: Path, duration_s: float,
              warmup_s: float, executors: int, rate: float) -> float:
    """Slot-seconds per row on ``executors`` static executors at a steady ``rate``."""
    load = Load("calibration", "calibration", duration_s, ((0.0, rate),), ((0.0, rate),))
    log, result = run_one(procs, cluster, env, work, load, "static-peak", executors, warmup_s)
    t0, t1 = result["t0"], result["t0"] + duration_s
    rows = rows_processed(log.batches, t0, t1)
    if rows <= 0:
        raise RuntimeError("calibration processed no rows")
    return busy_slot_seconds(log.tasks, t0, t1) / rows


def report_options(argv: Sequence[str]) -> str:
    """The command-line options that change what ran, for the report's command line: not where
    it was written (--out) or whether the work folder was kept (--keep); --quick is shown apart."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif arg not in ("--keep", "--quick") and not arg.startswith("--out="):
            kept.append(arg)
    return " ".join(kept)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short loads: a smoke run of a few minutes")
    parser.add_argument("--loads", default="step,day",
                        help="comma-separated: step, day, fall (the load falls /4 and stays low; not run "
                             "by default)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help="comma-separated: " + ", ".join(POLICIES)
                        + f"; also {OTHER_TARGET}<target> (e.g. {OTHER_TARGET}0.8): sparkscale at another "
                        "utilization.target")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds: one run of each policy per round, their order rotated each round")
    parser.add_argument("--cost", type=float, help="slot-s per row: skip the calibration run")
    parser.add_argument("--settle-load", type=float, default=1.5,
                        help="before each run, wait (up to 3 min) for the 1-minute load average to be this")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for real_spark.md/.json/*.png")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (event logs, driver logs)")
    parser.add_argument("--render", type=Path, help="only redraw the report from a real_spark.json")
    parser.add_argument("--driver", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.driver:
        return driver_main(args.driver)
    if args.render:
        return render(json.loads(args.render.read_text()), args.out)
    started = time.monotonic()
    step_s, day_s, warmup_s, calib_s = (60.0, 80.0, 10.0, 20.0) if args.quick else (120.0, 210.0, 15.0, 25.0)
    fall_s = 2 * step_s
    all_loads = {"step": step_load(step_s), "day": day_load(day_s), "fall": fall_load(fall_s)}
    unknown = [name for name in args.loads.split(",") if name not in all_loads]
    if unknown:
        parser.error(f"--loads: unknown load {unknown[0]!r}; one of {', '.join(all_loads)}")
    loads = [all_loads[name] for name in args.loads.split(",")]
    policies = args.policies.split(",")
    for policy in policies:
        try:
            known = policy in POLICIES or other_target(policy) is not None
        except ValueError as e:
            parser.error(str(e))
        if not known:
            parser.error(f"unknown policy {policy!r}; one of {', '.join(POLICIES)} or {OTHER_TARGET}<target>")

    stop_on_sigterm()  # runs the finally below: every daemon is stopped
    import pyspark

    work = Path(tempfile.mkdtemp(prefix="sparkscale-bench-real-"))
    procs = Processes()
    env = spark_env()
    results: list[RunResult] = []
    calibration = {"executors": 3, "rate": 90.0}
    try:
        print(f"work folder {work}", flush=True)
        cluster = start_cluster(procs, work / "cluster", env)
        print(f"cluster up: {cluster.master_url} ({time.monotonic() - started:.0f}s)", flush=True)
        if args.cost is None:
            cost = calibrate(procs, cluster, env, work / "calibration", calib_s, warmup_s,
                             calibration["executors"], calibration["rate"])
        else:
            cost = args.cost
            calibration = {"executors": 0, "rate": math.nan}
        peak = max(rate for load in loads for _, rate in load.clean)
        static = oracle_executors(peak, cost)
        print(f"cost {cost:.4f} slot-s/row; static-peak {static} executors "
              f"({time.monotonic() - started:.0f}s)", flush=True)
        for rnd, load in ((rnd, load) for rnd in range(1, args.repeat + 1) for load in loads):
            for policy in rotated(policies, rnd):
                load_before = settle(args.settle_load)
                initial = oracle_executors(load.clean[0][1], cost) if load.start_sized else 1
                log, result = run_one(procs, cluster, env, work / f"{load.name}-{policy}-{rnd}", load, policy,
                                      static, warmup_s, initial)
                load_avg = f"{load_before:.2f} / {os.getloadavg()[0]:.2f}"
                run, figs = run_figures(log, load, result["t0"], cost)
                results.append(RunResult(load.name, policy, result["t0"], result["rows_in"],
                                         result["rows_out"], result["exactly_once"], result["drained"],
                                         result["wall_s"], figs,
                                         {"t": list(run.t), "executors": list(run.executors),
                                          "load": list(run.load), "lag_s": list(run.lag_s),
                                          "actions": [list(a) for a in run.actions]},
                                         max((b.latest_offset or 0 for b in log.batches), default=0),
                                         rnd, load_avg))
                print(f"{load.name:>5} {policy:<19} run {rnd} load {load_avg}  "
                      f"executor-s {figs['executor_s']:6.0f}  lag>thr "
                      f"{figs['lag_over_threshold_share']:6.1%}  max lag {figs['max_lag_s']:5.1f}s  actions "
                      f"{figs['actions']:.0f}  flaps {figs['flaps']:.0f}  failed {figs['failed_tasks']:.0f}  "
                      f"rows {result['rows_in']}/{result['rows_out']} exactly-once {result['exactly_once']}  "
                      f"({result['wall_s']:.0f}s; total {time.monotonic() - started:.0f}s)", flush=True)
    finally:
        procs.stop_all()
        if not args.keep:
            import shutil

            shutil.rmtree(work, ignore_errors=True)
    meta = {"quick": args.quick, "date": datetime.now().strftime("%Y-%m-%d %H:%M"),
            "spark": pyspark.__version__, "wall_min": (time.monotonic() - started) / 60,
            "cost_s_per_row": cost, "static_executors": static, "calibration": calibration,
            "settle_load": args.settle_load,
            "options": report_options(sys.argv[1:] if argv is None else argv)}
    return render({"meta": meta, "loads": [asdict(load) for load in loads],
                   "runs": [asdict(r) for r in results]}, args.out)



def render(data: Mapping[str, Any], out: Path) -> int:
    """Write real_spark.md, real_spark.json and a PNG per load from a run's data."""
    loads = [Load(d["name"], d["title"], d["duration_s"], tuple(tuple(x) for x in d["schedule"]),
                  tuple(tuple(x) for x in d["clean"]), tuple(d["steps"]), d.get("start_sized", False))
             for d in data["loads"]]
    results = [RunResult(**r) for r in data["runs"]]
    meta = data["meta"]
    write_report(out / "real_spark.md", markdown(results, loads, meta), data)
    for load in loads:
        plot(results, load, meta["cost_s_per_row"], out / f"real_spark_{load.name}.png")
    print(f"wrote {out / 'real_spark.md'} ({meta['wall_min']:.1f} min)")
    return 0 if all(r.exactly_once for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
