"""The evaluator on a recorded real-Spark series: a stateful query over a file source, which reports
no backlog (tests/data/file_stream/: what the control loop saw each tick, recorded by its script).
Replayed tick by tick into one MicroBatchEvaluator with the recorded executors and their changes,
as the control loop gives them: a quiet load needs one executor however long its batches run past
the trigger, a heavy one more, and once the files stop and their batches leave the window the
query is idle, nothing rising. (On the code before, the quiet phase needed 4 and the end read
"falling behind its trigger, no backlog reported", rising, every tick.)"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.options import PREFIX
from sparkscale_listener.decisions import Evaluation, ScalingContext, ScalingRecord
from sparkscale_listener.evaluator import MicroBatchEvaluator
from sparkscale_listener.metrics import BatchRecord, ClusterMetrics, InFlightBatch, MetricSample, QueryMetrics

SERIES = Path(__file__).resolve().parents[2] / "data" / "file_stream" / "series.json"
QUERY = "files"


@dataclass(frozen=True)
class Tick:
    time: float
    live: int
    evaluation: Evaluation


def samples(series: dict[str, Any]) -> list[MetricSample]:
    """Each recorded tick as the collector gave it: the query's latest 64 completed batches."""
    batches = {name: [BatchRecord(**b) for b in kept] for name, kept in series["batches"].items()}
    out = []
    for tick in series["ticks"]:
        queries = {}
        for name, q in tick["queries"].items():
            done = [b for b in batches[name] if q["last_batch"] is not None and b.batch_id <= q["last_batch"]]
            flight = q["in_flight"]
            queries[name] = QueryMetrics(
                query_id=name, name=name, trigger_interval_ms=q["trigger_interval_ms"], backlog=q["backlog"],
                backlog_problem=q["backlog_problem"], busy_ms=q["busy_ms"],
                max_stage_tasks=q["max_stage_tasks"], recent_batches=tuple(done[-64:]),
                in_flight=InFlightBatch(**flight) if flight else None, active=q["active"])
        cluster = ClusterMetrics(tick["live_executors"], tick["cores_per_executor"],
                                 other_tasks=tick["other_tasks"])
        out.append(MetricSample(tick["time"], cluster, queries))
    return out


@pytest.fixture(scope="module")
def series() -> dict[str, Any]:
    return json.loads(SERIES.read_text())


@pytest.fixture(scope="module")
def replayed(series: dict[str, Any]) -> list[Tick]:
    """Every tick evaluated in order, with the recorded executors; a change of their count is a
    scaling, measured afresh after stabilizationInterval, as the control loop does."""
    cfg = AutoscalerConfig.from_spark_conf(series["conf"])
    evaluator = MicroBatchEvaluator()
    history: list[MetricSample] = []
    last: ScalingRecord | None = None
    window_start = -math.inf
    out = []
    for sample in samples(series):
        history = [s for s in history if s.time >= sample.time - cfg.metrics_window_s - 4 * cfg.interval_s]
        live = sample.cluster.live_executors
        if history and live != history[-1].cluster.live_executors:
            before = history[-1].cluster.live_executors
            last = ScalingRecord(sample.time, "scale_up" if live > before else "scale_down", before, live, "")
            window_start = sample.time + cfg.stabilization_interval_s
        elif math.isinf(window_start):
            window_start = sample.time + cfg.stabilization_interval_s  # the start-up's baseline
        history.append(sample)
        context = ScalingContext(now=sample.time, config=cfg, current_target=live, live_executors=live,
                                 pending_executors=0, cores_per_executor=sample.cluster.cores_per_executor,
                                 window_start=window_start, provisioning_time_s=5.0, last_scaling=last)
        out.append(Tick(sample.time, live, evaluator.evaluate(history, context)))
    return out


def between(ticks: list[Tick], start: float, end: float) -> list[Tick]:
    return [t for t in ticks
            if start <= t.time < end and t.evaluation.ready and QUERY in t.evaluation.queries]


def test_the_recording_is_what_its_readme_says(series: dict[str, Any]) -> None:
    assert series["exactly_once"] and series["spark"].startswith("4.")
    assert series["conf"][PREFIX + "backlogThreshold"] == "60s"
    rows = {b["rows"] for b in series["batches"][QUERY]}
    assert rows and all(r % 200 == 0 for r in rows) and max(rows) == 1200  # whole files, 6 at most
    quiet = [b for b in series["batches"][QUERY]
             if series["phases"]["quiet"][0] + 40 <= b["start"] < series["phases"]["quiet"][1]]
    # Past the 1 s trigger, every one of them.
    assert quiet and all(b["duration_s"] > 1.0 and b["backlog"] is None for b in quiet)


def test_a_quiet_file_stream_needs_one_executor_though_its_batches_run_past_the_trigger(
        series: dict[str, Any], replayed: list[Tick]) -> None:
    start, end = series["phases"]["quiet"]
    quiet = between(replayed, start + 40.0, end)
    assert len(quiet) > 20
    for t in quiet:
        q = t.evaluation.queries[QUERY]
        assert q.required_executors == 1 and not q.capped, (t.time - start, q.note)
        assert "a read limit binds" not in q.note and "falling behind" not in q.note


def test_a_heavy_file_stream_needs_more_and_not_all(series: dict[str, Any], replayed: list[Tick]) -> None:
    start, end = series["phases"]["heavy"]
    heavy = between(replayed, start + 30.0, end)
    assert heavy
    needed = [t.evaluation.queries[QUERY].required_executors for t in heavy]
    assert max(needed) >= 2 and sorted(needed)[len(needed) // 2] <= 3, needed


def test_once_the_files_stop_and_their_batches_leave_the_window_the_query_is_idle(
        series: dict[str, Any], replayed: list[Tick]) -> None:
    cfg = AutoscalerConfig.from_spark_conf(series["conf"])
    last_end = max(b["start"] + b["duration_s"] for b in series["batches"][QUERY])
    idle = between(replayed, last_end + cfg.metrics_window_s + cfg.interval_s, math.inf)
    assert len(idle) >= 10
    for t in idle:
        q = t.evaluation.queries[QUERY]
        assert "idle" in q.note and not q.rising and not t.evaluation.rising, q.note
        assert t.evaluation.recommended_executors == cfg.min_executors
