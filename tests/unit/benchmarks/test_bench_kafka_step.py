"""The Kafka step benchmark's figures, on a hand-made run (no Spark, no broker)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_kafka_step.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_kafka_step", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_kafka_step"] = module
    spec.loader.exec_module(module)
    return module


def _progress(start_s: float, duration_s: float, end_offset: int) -> dict:
    from datetime import datetime, timezone

    stamp = datetime.fromtimestamp(start_s, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    return {"timestamp": stamp, "durationMs": {"triggerExecution": duration_s * 1000}, "numInputRows": 20,
            "sources": [{"endOffset": f'{{"t": {{"0": {end_offset}}}}}'}]}


def test_lag_executor_seconds_and_targets() -> None:
    bench = _load()
    t0 = 1_000_000.0
    # 10 records/s produced for 100 s; batches every 2 s commit all produced by their start, except
    # from 40 s to 60 s, when nothing commits (a lag of up to 20 s).
    produced = [(t0 + 0.25 * i, int(2.5 * i)) for i in range(400)]
    progress = [_progress(t0 + s, 1.0, 10 * s) for s in range(0, 100, 2) if not 40 <= s < 60]
    execs = [(t0 + 0.5 * i, 2 if i < 100 else 4) for i in range(200)]  # 2 executors, 4 from 50 s
    decisions = [{"time": t0 + 45, "action": "scale_up", "from_executors": 2, "to_executors": 4}]
    run = bench.figures("sparkscale", t0, t0 + 30, t0 + 70, t0 + 100, progress, produced, execs, decisions,
                        "0.1 0.1 0.1", "0.2 0.2 0.2")
    # The batch of 38 s commits what was sent by 38 s (at 39 s); nothing more until 61 s: the lag is
    # the age of the records sent from 38 s on, over 10 s from 49 s to 60 s, 12 of the 80 judged seconds.
    assert run["lag_over_limit"] == pytest.approx(12 / 80)
    assert run["max_lag_s"] == pytest.approx(22.0) and run["high_max_lag_s"] == run["max_lag_s"]
    assert run["back_under_limit_s"] == pytest.approx(31, abs=1)
    assert run["first_scale_up_after_step_s"] == 15.0 and not run["scale_down_while_high"]
    assert run["executor_s"] == pytest.approx(2 * 30 + 4 * 49.5, abs=2)  # from 20 s in
    assert run["batch_s"] == {"low": 1.0, "high": 1.0, "tail": 1.0}
    da = dict(run, policy="da", executor_s=run["executor_s"] * 2, lag_over_limit=0.2)
    text = bench.report([run, da])
    assert "| sparkscale | 1 |" in text and "| da | 1 |" in text
    assert "a 2 s trigger" in text and "| 1.0 s / 1.0 s / 1.0 s |" in text
    assert "a 5 s trigger" in bench.report([dict(run, trigger_s=5.0), da])
    assert bench.results_path(2.0).name == "kafka_step.md"
    assert bench.results_path(5.0).name == "kafka_step_5s.md"
    assert "first scale-up within 20 s of the step (15 s): **met**" in text
    assert "lag under 10 s again within 90 s of the step (31 s): **met**" in text
    assert "executor-seconds at most 0.75x dynamic allocation's (0.50x): **met**" in text
    # A run at maxExecutors when the step came needed no scale-up after it.
    ahead = dict(run, first_scale_up_after_step_s=None, executors=[(0.0, 2), (25.0, 4)])
    assert "(at maxExecutors already): **met**" in bench.report([ahead, da])
    assert "less than dynamic allocation's (15.0% vs 20.0%): **not met**" in text
