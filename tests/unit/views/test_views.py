"""status() and decisions(): dicts as before (JSON, comparisons), typed attributes, readable print."""

from __future__ import annotations

import json

from sparkscale_listener.config import AutoscalerConfig
from sparkscale_listener.sim import SimQuery, Simulation, step_load
from sparkscale_listener.views import DecisionList, DecisionView, Status


def _run() -> Simulation:
    q = SimQuery("orders", step_load(1000, 4000, at=300), cost_per_row=0.004, trigger_interval_s=10,
                 partitions=32, batch_overhead_s=0.5)
    sim = Simulation(AutoscalerConfig(max_executors=12), [q], initial_executors=2)
    sim.run(900)
    return sim


def test_status_and_decisions_are_dicts_that_print_for_a_person() -> None:
    scaler = _run().autoscaler
    status = scaler.status()
    assert isinstance(status, Status) and isinstance(status, dict)
    assert status.live_executors == status["live_executors"] and status.mode == "autoscale"
    assert json.loads(json.dumps(status)) == json.loads(json.dumps(dict(status)))
    text = str(status)
    assert text.startswith(f"sparkscale (autoscale): {status.live_executors} executors live, target ")
    assert "last decision: " in text and "\n" in text and "{" not in text

    applied = scaler.decisions(applied_only=True)
    assert isinstance(applied, DecisionList) and applied and all(isinstance(d, DecisionView) for d in applied)
    first = applied[0]
    assert first.action == first["action"] == "scale_up" and first.applied
    assert first.to_executors > first.from_executors and first.reason == first["reason"]
    line = str(first)
    assert f"scale_up {first.from_executors} -> {first.to_executors} (applied): {first.reason}" in line
    assert len(str(applied).splitlines()) == len(applied)
    assert json.loads(json.dumps(applied))[0]["action"] == "scale_up"
    assert str(DecisionList()) == "(no decision yet)"
