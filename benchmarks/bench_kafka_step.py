"""A x10 step on real Kafka: sparkscale against Spark's dynamic allocation, on the same load.

A real broker (tests/kafka_broker.py), a topic of 8 partitions, the Kafka job of
``examples/kafka_job.py`` (a Python UDF of 5 ms per record, a 2 s trigger unless ``--trigger`` says
otherwise, a read limit high enough never to bind), a local-cluster of up to 4 one-core executors
starting with 2. The producer sends 50 records/s for 60 s, 500 for 150 s, then 50 for 150 s.
sparkscale runs with the demo's compressed timescale (``testing/demo.py``: a 2 s interval, a 10 s
window, a 16 s scale-down interval, 30 s catch-up), dynamic allocation with its defaults and shuffle
tracking. Each run is an application of its own, in a process of its own; the policies alternate. A
benchmark, not a test: run it alone on the machine (through the heavy-run lock), about 7 minutes a
run::

    .venv/bin/python benchmarks/bench_kafka_step.py [--repeat 3] [--policies sparkscale,da] [--trigger 2]

(``sparkscale-batches``: sparkscale with ``kafka.latestOffsets=false``, its arrivals known from
completed batches only. ``--conf spark.KEY=VALUE``, repeatable: a Spark setting for every policy's
application, e.g. ``spark.locality.wait=0s``. ``--decisions DIR``: every decision of each sparkscale
run, with each query's figures and notes, in a file of its own there.)

Per run, from the query's own progress and the producer's send times: the lag (the age of the
oldest record produced and not yet committed by a batch, each second from 20 s in), the share of
the run it is over 10 s, its worst, the seconds after the step until it stays under 10 s for the
rest of the high phase, the executor-seconds (live executors sampled every 0.5 s), the applied
actions, and whether any scale-down came while the load was high. The load average is recorded
beside each run, and the median batch time of each phase. Writes ``benchmarks/results/kafka_step.md``
(``kafka_step_<N>s.md`` for another trigger) and its ``.json``: every run, then the median and range
per policy against the targets.

``--shape recurring`` (issue 56's real-Spark measurement of the forecast): instead of the step, a
period of 160 s (50 records/s for 50 s, a ramp to 500 in 10 s, 500 for 50 s, back to 50 in 10 s, 50
for 40 s) repeated ``--periods`` times (3), for ``sparkscale-forecast`` (``forecast.mode=on``,
``forecast.period=160s``), ``sparkscale`` (``forecast.mode=off``) and ``da``, about 10 minutes a run.
The forecast learns in the first period: lag and executor-seconds are from the second on, beside
each period's executors at its ramp, its first scale-up from the ramp (negative: a pre-scale before
it) and its worst lag. Writes ``benchmarks/results/forecast_kafka.md`` and its ``.json``, against
the issue's target (with the forecast, lag over 10 s at most half of the reactive run's at at most
1.05x its executor-seconds). ``--event-log DIR``: each run's Spark event log, zstd, in a folder of
its own there (the multi-period log under ``tests/data/eventlogs/`` is one).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

# runner.py sits next to this file; benchmarks/ is a folder of scripts, not a package.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from runner import (
    REPO,
    RESULT_FILE,
    RESULTS,
    Processes,
    dynamic_allocation_conf,
    epoch,
    json_value,
    load_average,
    median_range,
    run_application,
    spark_env,
    sparkscale_conf,
    stop_on_sigterm,
    write_report,
)

DEFAULT_TRIGGER_S = 2.0
LOW, HIGH = 50.0, 500.0
LOW_S, HIGH_S, TAIL_S = 60.0, 150.0, 150.0
LAG_LIMIT_S = 10.0
MAX_EXECUTORS = 4
SKIP_S = 20.0  # the start (the query's first batches, the baseline) is not judged
INITIAL_EXECUTORS = 2
POLICIES = {
    "sparkscale": sparkscale_conf(MAX_EXECUTORS, INITIAL_EXECUTORS),
    # The same, its arrivals from completed batches only (no latest offsets read between batches).
    "sparkscale-batches": sparkscale_conf(MAX_EXECUTORS, INITIAL_EXECUTORS, {"kafka.latestOffsets": "false"}),
    # Spark's own within the same bounds, sparkscale switched off in the job's session.
    "da": {"spark.sparkscale.enabled": "false", **dynamic_allocation_conf(MAX_EXECUTORS, INITIAL_EXECUTORS)},
}
# The recurring shape (``--shape recurring``): a compressed period repeated, each with a steep x10
# ramp, a plateau and the way back down, for sparkscale with the forecast (its period given) and
# without, and dynamic allocation. The forecast learns in the first period: the figures are from
# the second on.
PERIOD_S = 160.0
RECURRING_PERIOD: list[tuple[float, float, float]] = [
    (50.0, LOW, LOW), (10.0, LOW, HIGH), (50.0, HIGH, HIGH), (10.0, HIGH, LOW), (40.0, LOW, LOW),
]
RAMP_SEGMENT, DOWN_SEGMENT = 1, 3  # the ramp's segment and the way down's, within a period
DEFAULT_PERIODS = 3
RECURRING_POLICIES = {
    "sparkscale": {**POLICIES["sparkscale"], "spark.sparkscale.forecast.mode": "off"},
    "sparkscale-forecast": {**POLICIES["sparkscale"], "spark.sparkscale.forecast.mode": "on",
                            "spark.sparkscale.forecast.period": f"{PERIOD_S:g}s"},
    "da": POLICIES["da"],
}
# A run's deadline beyond its load: the broker, the application and the query starting and stopping.
RUN_SLACK_S = 300.0


def results_path(trigger_s: float) -> Path:
    """Where a trigger's report goes (its ``.json`` beside it holds every run's figures)."""
    return RESULTS / ("kafka_step.md" if trigger_s == DEFAULT_TRIGGER_S else f"kafka_step_{trigger_s:g}s.md")


# A load shape: segments of (seconds, rate at the start, rate at the end), records/s; a ramp where
# the two differ, its rate set every RAMP_TICK_S.
Shape = list[tuple[float, float, float]]
STEP_SHAPE: Shape = [(LOW_S, LOW, LOW), (HIGH_S, HIGH, HIGH), (TAIL_S, LOW, LOW)]
RAMP_TICK_S = 0.5


def drive(producer: Any, shape: Shape) -> list[float]:
    """Send ``shape`` through ``producer``; the epoch time each segment started, then the end."""
    starts = []
    for seconds, start_rate, end_rate in shape:
        began = time.time()
        starts.append(began)
        if start_rate == end_rate:
            producer.set_rate(start_rate)
            time.sleep(seconds)
            continue
        while (elapsed := time.time() - began) < seconds:
            producer.set_rate(start_rate + (end_rate - start_rate) * elapsed / seconds)
            time.sleep(min(RAMP_TICK_S, seconds - elapsed))
    starts.append(time.time())
    return starts


def run_once(policy: str, trigger_s: float = DEFAULT_TRIGGER_S,
             conf: dict[str, str] | None = None, decisions_dir: Path | None = None) -> dict[str, Any]:
    """One application under ``policy`` (and the Spark settings ``conf``, for every policy) through
    the x10 step; its figures. With ``decisions_dir``, sparkscale's every decision (reason, details,
    each query's figures and notes) goes to a file of its own there: what a figure alone cannot
    tell, such as which signal held a scale-down."""
    run = record(policy, STEP_SHAPE, trigger_s, conf, decisions_dir)
    t0, t_step, t_down, t_end = run["starts"]
    return figures(
        policy, t0, t_step, t_down, t_end, run["progress"], run["produced"], run["execs"], run["decisions"],
        run["load_start"], run["load_end"],
    ) | {"trigger_s": trigger_s, "conf": conf or {}}


def record(policy: str, shape: Shape, trigger_s: float = DEFAULT_TRIGGER_S,
           conf: dict[str, str] | None = None, decisions_dir: Path | None = None,
           policies: dict[str, dict[str, str]] | None = None) -> dict[str, Any]:
    """One application under ``policy`` with the producer sending ``shape``: what the figures are
    read from (``starts``: each segment's start time, then the end; the query's progress, the
    records produced and the live executors sampled, sparkscale's applied decisions, the load
    averages at the start and the end)."""
    sys.path.insert(0, str(REPO / "tests"))
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark
    from kafka_broker import KafkaBroker, connector_jars

    from examples.kafka_job import build_session, enrich, read_topic, start_query
    from sparkscale_listener import autoscaler
    from sparkscale_listener.spark.jars import installed_versions
    from sparkscale_listener.testing.demo import cluster_conf, quiet_executor_removal_noise

    work = Path(tempfile.mkdtemp(prefix="kafka-step-"))
    spark_version, scala = installed_versions()
    _, jars = connector_jars(spark_version, scala, Path(pyspark.__file__).parent / "jars")
    started_load = load_average()
    with KafkaBroker(work / "kafka").start() as broker:
        broker.create_topic("t", 8)
        extra = {
            "spark.ui.enabled": "false",
            "spark.sql.streaming.numRecentProgressUpdates": "2000",
            **(policies or POLICIES)[policy],
            **(conf or {}),
        }
        spark = build_session(
            "kafka-step", connector_jars=jars, conf=cluster_conf(work, workers=4, extra=extra)
        )
        spark.sparkContext.setLogLevel("ERROR")
        quiet_executor_removal_noise(spark)
        scaler = autoscaler(spark) if policy.startswith("sparkscale") else None
        producer = broker.producer("t")
        produced: list[tuple[float, int]] = []
        execs: list[tuple[float, int]] = []
        stop = threading.Event()

        def sample() -> None:
            sc = spark.sparkContext._jsc.sc()
            while not stop.wait(0.25):
                produced.append((time.time(), producer.produced))
                if len(produced) % 2 == 0:
                    execs.append((time.time(), sc.getExecutorMemoryStatus().size() - 1))

        producer.set_rate(shape[0][1])
        frame = read_topic(spark, broker.bootstrap, "t", 1_000_000)
        query = start_query(
            enrich(frame, 0.005), work / "out", work / "chk", name="kafka-step",
            trigger=f"{trigger_s:g} seconds",
        )
        threading.Thread(target=sample, daemon=True).start()
        starts = drive(producer, shape)
        stop.set()
        progress = list(query.recentProgress)
        decisions = scaler.decisions(applied_only=True) if scaler else []
        if scaler is not None and decisions_dir is not None:
            decisions_dir.mkdir(parents=True, exist_ok=True)
            every = [dict(d) for d in scaler.decisions()]
            path = decisions_dir / f"{policy}-{datetime.fromtimestamp(starts[0]):%Y%m%d-%H%M%S}.json"
            path.write_text(json.dumps({"t0": starts[0], "decisions": every}, default=str), encoding="utf-8")
        query.stop()
        spark.stop()
        producer.close()
    return {"starts": starts, "progress": progress, "produced": produced, "execs": execs,
            "decisions": decisions, "load_start": started_load, "load_end": load_average()}


def figures(
    policy: str,
    t0: float,
    t_step: float,
    t_down: float,
    t_end: float,
    progress: list[Any],
    produced: list[tuple[float, int]],
    execs: list[tuple[float, int]],
    decisions: list[dict[str, Any]],
    load_start: str,
    load_end: str,
    judged_from: float | None = None,
) -> dict[str, Any]:
    """A run's figures; its lag and executor-seconds from ``judged_from`` (``SKIP_S`` in unless given)."""
    batches: list[tuple[float, float]] = []  # (batch start, seconds) of batches that read rows
    near_step: list[tuple[float, float, int]] = []  # (start after the step, seconds, rows), around it
    for p in progress:
        if json_value(p["sources"][0].get("endOffset")):
            start = epoch(p["timestamp"])
            took = p["durationMs"].get("triggerExecution", 0) / 1000
            if p.get("numInputRows", 0) > 0:
                batches.append((start, took))
            if -15.0 <= start - t_step <= 60.0:
                near_step.append((round(start - t_step, 1), round(took, 1), int(p.get("numInputRows", 0))))
    lag_at = lag_reader(committed_offsets(progress), produced)
    judged_from = t0 + SKIP_S if judged_from is None else judged_from
    grid = [judged_from + i for i in range(int(t_end - judged_from))]
    lags = [lag_at(t) for t in grid]
    high = [t for t in grid if t_step <= t < t_down]
    back = next((t - t_step for t in high if all(lag_at(u) <= LAG_LIMIT_S for u in high if u >= t)), None)
    executor_s = sum((b[0] - a[0]) * a[1] for a, b in itertools.pairwise(execs) if a[0] >= judged_from)
    actions = [
        (round(d["time"] - t0, 1), d["action"], d["from_executors"], d["to_executors"]) for d in decisions
    ]
    ups = [a for a in actions if a[1] == "scale_up" and a[0] >= t_step - t0]
    changes, last = [], None
    for t, n in execs:  # the executor count over time, for any policy
        if n != last:
            changes.append((round(t - t0, 1), n))
            last = n
    return {
        "policy": policy,
        "step_at_s": round(t_step - t0, 1),
        "down_at_s": round(t_down - t0, 1),
        "lag_over_limit": sum(x > LAG_LIMIT_S for x in lags) / len(lags),
        "max_lag_s": max(lags),
        "high_max_lag_s": max((lag_at(t) for t in high), default=0.0),
        "back_under_limit_s": back,
        "executor_s": executor_s,
        "actions": actions,
        "reasons": [d.get("reason", "") for d in decisions],
        "executors": changes,
        "batches_near_step": near_step,
        "first_scale_up_after_step_s": round(ups[0][0] - (t_step - t0), 1) if ups else None,
        "scale_down_while_high": any(
            a[1] == "scale_down" and t_step - t0 <= a[0] < t_down - t0 for a in actions
        ),
        "load_start": load_start,
        "load_end": load_end,
        # What the executors had to do: the median batch time of each phase (from SKIP_S in).
        "batch_s": {phase: _median([d for t, d in batches if lo <= t < hi])
                    for phase, lo, hi in (("low", t0 + SKIP_S, t_step), ("high", t_step, t_down),
                                          ("tail", t_down, t_end))},
    }


def committed_offsets(progress: list[Any]) -> list[tuple[float, int]]:
    """(batch end, records committed by then) of each batch that had an end offset."""
    commits = []
    for p in progress:
        end = json_value(p["sources"][0].get("endOffset"))
        if end:
            took = p["durationMs"].get("triggerExecution", 0) / 1000
            commits.append((epoch(p["timestamp"]) + took, int(sum(end["t"].values()))))
    return commits


def lag_reader(commits: list[tuple[float, int]],
               produced: list[tuple[float, int]]) -> Callable[[float], float]:
    """The lag at a time: the age of the oldest record produced and not yet committed by a batch."""
    commit_times = [c[0] for c in commits]
    sent_times = [t for t, _ in produced]
    sent = [n for _, n in produced]

    def lag_at(t: float) -> float:
        i = bisect.bisect_right(commit_times, t) - 1
        committed = commits[i][1] if i >= 0 else 0
        j = bisect.bisect_right(sent, committed)  # the first sample with a record not yet committed
        if j >= len(sent) or sent_times[j] > t:
            return 0.0
        return t - sent_times[j - 1] if j > 0 else t - sent_times[0]

    return lag_at


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _executors_at(run: dict[str, Any], t: float) -> int:
    """Live executors ``t`` seconds into a run (its sampled changes)."""
    live = 0
    for at, n in run["executors"]:
        if at > t:
            break
        live = n
    return live


def _by_policy(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by_policy.setdefault(r["policy"], []).append(r)
    return by_policy


def _policy_row(policy: str, rs: list[dict[str, Any]], back_under_limit: bool = False) -> str:
    """A policy's runs as one row of median (range): lag, worst lag, [back under the limit,] cost."""
    back = ""
    if back_under_limit:
        backs = [r["back_under_limit_s"] for r in rs if r["back_under_limit_s"] is not None]
        back = f" {median_range(backs, '{:.0f} s')} |"
    return (f"| {policy} | {len(rs)} | {median_range([100 * r['lag_over_limit'] for r in rs], '{:.1f} %')} | "
            f"{median_range([r['max_lag_s'] for r in rs], '{:.1f} s')} |{back} "
            f"{median_range([r['executor_s'] for r in rs])} |")


def report(runs: list[dict[str, Any]]) -> str:
    trigger_s = runs[0].get("trigger_s", DEFAULT_TRIGGER_S) if runs else DEFAULT_TRIGGER_S
    lines = [
        "# A x10 step on real Kafka",
        "",
        "`benchmarks/bench_kafka_step.py`: a real broker, 8 partitions, 5 ms of Python UDF per record, "
        f"a {trigger_s:g} s trigger, a read limit that never binds, a local-cluster of up to 4 one-core "
        f"executors starting with 2; {LOW:.0f} -> {HIGH:.0f} -> {LOW:.0f} records/s ({LOW_S:.0f} s, "
        f"{HIGH_S:.0f} s, {TAIL_S:.0f} s). Lag: the age of the oldest record not yet committed, each "
        f"second from {SKIP_S:.0f} s in.",
        "",
        *([f"Spark settings for every policy: {', '.join(f'`{k}={v}`' for k, v in runs[0]['conf'].items())}.",
           ""] if runs and runs[0].get("conf") else []),
        "| run | policy | load avg (start / end) | lag > 10 s | worst lag | worst in the high phase | "
        "under 10 s again after the step | first scale-up after the step | scale-down while high | "
        "executor-s | median batch (low / high / tail) | actions |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        back = "never" if r["back_under_limit_s"] is None else f"{r['back_under_limit_s']:.0f} s"
        first = (
            "-" if r["first_scale_up_after_step_s"] is None else f"{r['first_scale_up_after_step_s']:.0f} s"
        )
        acts = ", ".join(f"{a} {f}->{t} at {s:.0f} s" for s, a, f, t in r["actions"]) or "(its own)"
        took = " / ".join("-" if b is None else f"{b:.1f} s" for b in r.get("batch_s", {}).values()) or "-"
        lines.append(
            f"| {i} | {r['policy']} | {r['load_start']} / {r['load_end']} | {r['lag_over_limit']:.1%} | "
            f"{r['max_lag_s']:.1f} s | {r['high_max_lag_s']:.1f} s | {back} | {first} | "
            f"{'yes' if r['scale_down_while_high'] else 'no'} | {r['executor_s']:.0f} | {took} | {acts} |"
        )
    lines += [
        "",
        "Median (range) per policy:",
        "",
        "| policy | runs | lag > 10 s | worst lag | under 10 s again after the step | executor-s |",
        "|---|---|---|---|---|---|",
    ]
    by_policy = _by_policy(runs)
    lines += [_policy_row(policy, rs, back_under_limit=True) for policy, rs in by_policy.items()]
    ss, da = by_policy.get("sparkscale", []), by_policy.get("da", [])
    if ss and da:
        ratio = statistics.median(r["executor_s"] for r in ss) / statistics.median(
            r["executor_s"] for r in da
        )
        lag_ss = statistics.median(r["lag_over_limit"] for r in ss)
        lag_da = statistics.median(r["lag_over_limit"] for r in da)
        firsts = [r["first_scale_up_after_step_s"] for r in ss]
        # A run already at maxExecutors when the step came needed no scale-up: the target holds.
        at_max = [_executors_at(r, r["step_at_s"]) >= MAX_EXECUTORS for r in ss]
        backs = [r["back_under_limit_s"] for r in ss]
        met = lambda ok: "**met**" if ok else "**not met**"  # noqa: E731
        first_s = ", ".join(("at maxExecutors already" if m else "none") if f is None else f"{f:.0f} s"
                            for f, m in zip(firsts, at_max, strict=True))
        back_s = ", ".join("never" if b is None else f"{b:.0f} s" for b in backs)
        lines += [
            "",
            "Targets (sparkscale, medians):",
            "",
            f"- no scale-down while the load is high: {met(not any(r['scale_down_while_high'] for r in ss))}",
            f"- first scale-up within 20 s of the step ({first_s}): "
            f"{met(all((f is not None and f <= 20) or m for f, m in zip(firsts, at_max, strict=True)))}",
            f"- lag under 10 s again within 90 s of the step ({back_s}): "
            f"{met(all(b is not None and b <= 90 for b in backs))}",
            f"- lag over 10 s at most 5 % of the run and less than dynamic allocation's ({lag_ss:.1%} vs "
            f"{lag_da:.1%}): {met(lag_ss <= 0.05 and lag_ss < lag_da)}",
            f"- executor-seconds at most 0.75x dynamic allocation's ({ratio:.2f}x): {met(ratio <= 0.75)}",
        ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------- the recurring ramp (--shape recurring)
def event_log_conf(directory: Path) -> dict[str, str]:
    """Spark's event log of a run in ``directory``: one zstd file, as the recorded logs under
    ``tests/data/eventlogs/`` are (a multi-period run for the replay). zstd's level 19 rather than
    Spark's 1 (about 15 KB/s of JSON: the driver's CPU for it is negligible, and the job's own
    compression is lz4's); Spark flushes the stream at every event all the same, so a run of three
    periods is 1.6 MB (its 12 MB of JSON compressed again in one frame: 0.3 MB)."""
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": str(directory),
            "spark.eventLog.compress": "true", "spark.eventLog.compression.codec": "zstd",
            "spark.io.compression.zstd.level": "19", "spark.eventLog.rolling.enabled": "false"}


def recurring_shape(periods: int) -> Shape:
    return RECURRING_PERIOD * periods


def run_recurring(policy: str, periods: int = DEFAULT_PERIODS, trigger_s: float = DEFAULT_TRIGGER_S,
                  conf: dict[str, str] | None = None, decisions_dir: Path | None = None) -> dict[str, Any]:
    """One application under ``policy`` through ``periods`` of the recurring ramp; its figures."""
    run = record(policy, recurring_shape(periods), trigger_s, conf, decisions_dir, RECURRING_POLICIES)
    return recurring_figures(policy, periods, run) | {"trigger_s": trigger_s, "conf": conf or {}}


def recurring_figures(policy: str, periods: int, run: dict[str, Any]) -> dict[str, Any]:
    """The figures after the first period (of the whole run if it has one period), as for the step
    (its "high phase" the second period's ramp and plateau), and each period's: the executors as its
    ramp began, its first scale-up from the time of its ramp (negative: before it), its worst lag."""
    starts = run["starts"]
    t0, t_end = starts[0], starts[-1]
    per = len(RECURRING_PERIOD)
    judged = 1 if periods > 1 else 0
    ramp, down = starts[judged * per + RAMP_SEGMENT], starts[judged * per + DOWN_SEGMENT + 1]
    result = figures(
        policy, t0, ramp, down, t_end, run["progress"], run["produced"], run["execs"], run["decisions"],
        run["load_start"], run["load_end"], judged_from=t0 + judged * PERIOD_S if judged else None,
    )
    lag_at = lag_reader(committed_offsets(run["progress"]), run["produced"])
    each = []
    for k in range(periods):
        began, ramp_k, ended = starts[k * per], starts[k * per + RAMP_SEGMENT], starts[(k + 1) * per]
        ups = [t for t, action, _, _ in result["actions"]
               if action == "scale_up" and began - t0 <= t < ended - t0]
        each.append({
            "executors_at_ramp": _executors_at(result, ramp_k - t0),
            "first_scale_up_from_ramp_s": round(ups[0] - (ramp_k - t0), 1) if ups else None,
            "max_lag_s": max(lag_at(began + i) for i in range(int(ended - began))),
        })
    pre_scales = [r for r in result["reasons"] if r.startswith("pre-scale")]
    return result | {"shape": "recurring", "periods": each, "judged_from_s": round(judged * PERIOD_S, 1),
                     "pre_scales": pre_scales}


def _settings(conf: dict[str, str]) -> str:
    # Each run's event log has a folder of its own: the setting, not the folder, is the same for all.
    return ", ".join(f"`{k}={v}`" for k, v in conf.items() if k != "spark.eventLog.dir")


def _settings_lines(runs: list[dict[str, Any]]) -> list[str]:
    """The Spark settings given to the runs (``--conf``, ``--event-log``): for all, or run by run."""
    runs_of: dict[str, list[int]] = {}
    for i, r in enumerate(runs, 1):
        runs_of.setdefault(_settings(r.get("conf") or {}), []).append(i)
    if list(runs_of) == [""]:
        return []
    if len(runs_of) == 1:
        return [f"Spark settings for every policy: {next(iter(runs_of))}.", ""]
    said = "; ".join(f"{settings or 'none'} (run {', '.join(map(str, ns))})"
                     for settings, ns in runs_of.items())
    return [f"Spark settings given: {said}.", ""]


def _from_ramp(seconds: float | None) -> str:
    return "none" if seconds is None else f"{seconds:+.0f} s"


def recurring_results_path() -> Path:
    return RESULTS / "forecast_kafka.md"


def recurring_report(runs: list[dict[str, Any]]) -> str:
    trigger_s = runs[0].get("trigger_s", DEFAULT_TRIGGER_S) if runs else DEFAULT_TRIGGER_S
    periods = len(runs[0]["periods"]) if runs else DEFAULT_PERIODS
    judged = "after the first period" if periods > 1 else "of the whole run (one period)"
    segments = ", ".join(
        f"{a:.0f} for {d:.0f} s" if a == b else f"{a:.0f} -> {b:.0f} over {d:.0f} s"
        for d, a, b in RECURRING_PERIOD
    )
    lines = [
        "# A recurring x10 ramp on real Kafka: the forecast",
        "",
        f"`benchmarks/bench_kafka_step.py --shape recurring`: the step benchmark's broker, job and "
        f"cluster (8 partitions, 5 ms of Python UDF per record, a {trigger_s:g} s trigger, up to "
        f"{MAX_EXECUTORS} one-core executors starting with {INITIAL_EXECUTORS}); a period of "
        f"{PERIOD_S:.0f} s ({segments}; records/s) repeated {periods} times. sparkscale on the demo's "
        "compressed timescale with `forecast.mode=off` (sparkscale) and with `forecast.mode=on`, "
        f"`forecast.period={PERIOD_S:g}s` (sparkscale-forecast); Spark's dynamic allocation with its "
        "defaults and shuffle tracking. Lag: the age of the oldest record not yet committed, each "
        f"second; lag and executor-seconds {judged}.",
        "",
        *_settings_lines(runs),
        "| run | policy | load avg (start / end) | lag > 10 s | worst lag | executor-s | "
        "per period: executors at the ramp, first scale-up from the ramp, worst lag | pre-scales | actions |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(runs, 1):
        each = "; ".join(
            f"{p['executors_at_ramp']}, {_from_ramp(p['first_scale_up_from_ramp_s'])}, {p['max_lag_s']:.0f} s"
            for p in r["periods"]
        )
        acts = ", ".join(f"{a} {f}->{t} at {s:.0f} s" for s, a, f, t in r["actions"]) or "(its own)"
        lines.append(
            f"| {i} | {r['policy']} | {r['load_start']} / {r['load_end']} | {r['lag_over_limit']:.1%} | "
            f"{r['max_lag_s']:.1f} s | {r['executor_s']:.0f} | {each} | {len(r['pre_scales'])} | {acts} |"
        )
    by_policy = _by_policy(runs)
    lines += [
        "",
        "Median (range) per policy:",
        "",
        "| policy | runs | lag > 10 s | worst lag | executor-s |",
        "|---|---|---|---|---|",
    ]
    lines += [_policy_row(policy, rs) for policy, rs in by_policy.items()]
    on, off = by_policy.get("sparkscale-forecast", []), by_policy.get("sparkscale", [])
    if on and off:
        lag_on = statistics.median(r["lag_over_limit"] for r in on)
        lag_off = statistics.median(r["lag_over_limit"] for r in off)
        ratio = (statistics.median(r["executor_s"] for r in on)
                 / statistics.median(r["executor_s"] for r in off))
        met = lambda ok: "**met**" if ok else "**not met**"  # noqa: E731
        lines += [
            "",
            "Target (issue 56; sparkscale-forecast against sparkscale, medians):",
            "",
            f"- lag over 10 s at most half of the reactive run's ({lag_on:.1%} vs {lag_off:.1%}): "
            f"{met(lag_on <= lag_off / 2)}",
            f"- at most 1.05x its executor-seconds ({ratio:.2f}x): {met(ratio <= 1.05)}",
        ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--policies", help="comma-separated (sparkscale,da; recurring: "
                                           "sparkscale-forecast,sparkscale,da)")
    # a run, in this process
    parser.add_argument("--one", choices=sorted(POLICIES | RECURRING_POLICIES), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)  # where --one writes its figures
    parser.add_argument("--no-results", action="store_true", help="print only")
    parser.add_argument("--json", type=Path, help="also write every run's figures here (--no-results too)")
    parser.add_argument("--trigger", type=float, default=DEFAULT_TRIGGER_S,
                        help="the query's trigger in seconds (2: kafka_step.md; other: kafka_step_<N>s.md)")
    parser.add_argument("--decisions", type=Path, metavar="DIR",
                        help="write sparkscale's every decision of each run (with each query's notes) to DIR")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for every policy's application (repeatable), e.g. "
                             "spark.locality.wait=0s")
    parser.add_argument("--shape", choices=("step", "recurring"), default="step",
                        help="step: the x10 step (kafka_step.md); recurring: a period of a x10 ramp "
                             "repeated, sparkscale with and without the forecast (forecast_kafka.md)")
    parser.add_argument("--periods", type=int, default=DEFAULT_PERIODS,
                        help="--shape recurring: how many periods")
    parser.add_argument("--event-log", type=Path, metavar="DIR",
                        help="each run's Spark event log, zstd-compressed, in DIR/<policy>-<run>")
    args = parser.parse_args()
    recurring = args.shape == "recurring"
    known = RECURRING_POLICIES if recurring else POLICIES
    policies = (args.policies or ",".join(["sparkscale-forecast", "sparkscale", "da"] if recurring
                                         else ["sparkscale", "da"])).split(",")
    if unknown := [p for p in policies if p not in known]:
        parser.error(f"--policies {unknown}: --shape {args.shape} knows {sorted(known)}")
    conf = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("spark."):
            parser.error(f"--conf {item!r}: expected spark.KEY=VALUE")
        conf[key] = value
    if args.one:
        run = (run_recurring(args.one, args.periods, args.trigger, conf, args.decisions) if recurring
               else run_once(args.one, args.trigger, conf, args.decisions))
        if args.result is not None:
            args.result.write_text(json.dumps(run), encoding="utf-8")
        else:
            print("RESULT " + json.dumps(run), flush=True)
        return 0
    stop_on_sigterm()  # runs the finally below: no run's broker or executors outlive the benchmark
    procs, env = Processes(), spark_env()
    work = Path(tempfile.mkdtemp(prefix="kafka-step-runs-"))
    runs = []
    try:
        for i in range(args.repeat):
            for policy in policies:
                # Each run in a folder of its own (its output, its result); the run's process works
                # there, so a relative --decisions is made absolute first.
                run_dir = work / f"{policy}-{i + 1}"
                run_dir.mkdir()
                settings = [arg for item in args.conf for arg in ("--conf", item)]
                if args.decisions is not None:
                    settings += ["--decisions", str(args.decisions.resolve())]
                if args.event_log is not None:
                    events = args.event_log.resolve() / f"{policy}-{i + 1}"
                    events.mkdir(parents=True, exist_ok=True)
                    settings += [arg for key, value in event_log_conf(events).items()
                                 for arg in ("--conf", f"{key}={value}")]
                settings += ["--shape", args.shape, "--periods", str(args.periods)]
                command = [sys.executable, str(Path(__file__).resolve()), "--one", policy,
                           "--trigger", str(args.trigger), "--result", str(run_dir / RESULT_FILE), *settings]
                load_s = (sum(d for d, _, _ in recurring_shape(args.periods)) if recurring
                          else sum(d for d, _, _ in STEP_SHAPE))
                try:
                    run = run_application(procs, command, run_dir, env, load_s + RUN_SLACK_S,
                                          f"run {i + 1} {policy}")
                except RuntimeError as e:
                    print(f"failed: {e}", file=sys.stderr)
                    return 1
                runs.append(run)
                if args.json:
                    args.json.write_text(json.dumps(runs, indent=1), encoding="utf-8")
                print(
                    f"run {i + 1} {policy}: lag > 10 s {run['lag_over_limit']:.1%}, "
                    f"worst {run['max_lag_s']:.1f} s, "
                    f"executor-s {run['executor_s']:.0f}, actions {run['actions']}, load {run['load_start']}",
                    flush=True,
                )
    finally:
        procs.stop_all()
        shutil.rmtree(work, ignore_errors=True)
    text = recurring_report(runs) if recurring else report(runs)
    print(text)
    if not args.no_results:
        path = recurring_results_path() if recurring else results_path(args.trigger)
        write_report(path, text, runs, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
