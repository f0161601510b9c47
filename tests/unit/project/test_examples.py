"""The example plugins in examples/ work as the README says, loaded the way users load them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from examples.external_backlog import read_backlog_file
from examples.plugins import BusinessHoursFloorEvaluator, GradualRealizer
from harness import SteadyQuery, scaling_context, series
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.options import ConfigError
from sparkscale_listener.config.plugins import PluginContext, construct, load_class
from sparkscale_listener.evaluator import MetricEvaluator, MicroBatchEvaluator
from sparkscale_listener.realize.realizer import ScalingRealizer
from sparkscale_listener.sim import SimCluster, SimQuery, Simulation


def test_external_backlog_from_a_file_drives_the_evaluator(tmp_path: Path) -> None:
    backlog_file = tmp_path / "backlog.json"
    backlog_file.write_text(json.dumps({"orders": 300000, "ignored": "x"}))
    external = read_backlog_file(backlog_file)
    assert external == {"backlog.orders": 300000.0}

    # A query whose source reports no backlog: alone it looks comfortably served.
    query = SteadyQuery("q1", rate=100.0, cost=0.01, name="orders", trigger_s=10.0, cap=16)
    blind = MicroBatchEvaluator().evaluate(series([query], t1=120.0), scaling_context(120.0))
    seeing = MicroBatchEvaluator().evaluate(series([query], t1=120.0, external=lambda t: external),
                                            scaling_context(120.0))
    assert blind.queries["q1"].backlog is None
    assert seeing.queries["q1"].backlog == 300000.0
    assert seeing.queries["q1"].catch_up_rate > 0
    assert seeing.required_slots > blind.required_slots
    assert seeing.recommended_executors > blind.recommended_executors


def test_missing_or_malformed_backlog_file_gives_no_metrics(tmp_path: Path) -> None:
    assert read_backlog_file(tmp_path / "absent.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert read_backlog_file(tmp_path / "bad.json") == {}


def test_evaluator_plugin_loads_by_class_path_and_its_floor_drives_the_decision() -> None:
    config = AutoscalerConfig.from_keys({
        "maxExecutors": "20", "evaluator": "examples.plugins.BusinessHoursFloorEvaluator",
        "evaluator.floor": "6", "evaluator.hours": "00:00-00:00"})  # start == end: the whole day
    cls = load_class("evaluator", config.evaluator_class, MetricEvaluator, ("evaluate",))
    evaluator = construct(cls, PluginContext(config, config.module("evaluator.")), "evaluator")
    assert isinstance(evaluator, BusinessHoursFloorEvaluator)
    # A quiet query that two executors serve well inside the utilization band: only the floor
    # asks for more, and it must be what the autoscaler does.
    quiet = SimQuery("q1", load=lambda t: 40.0, cost_per_row=0.02, trigger_interval_s=2.0)
    result = Simulation(config, [quiet], initial_executors=2, evaluator=evaluator).run(30 * 60)
    ups = [a for a in result.actions if a.action == "scale_up"]
    assert [(a.from_executors, a.to_executors) for a in ups] == [(2, 6)]
    assert "business-hours floor of 6" in ups[0].reason
    assert result.final_executors == 6
    assert not [a for a in result.actions if a.action == "scale_down"]


def test_evaluator_plugin_rejects_unknown_keys_at_startup() -> None:
    config = AutoscalerConfig.from_keys({"evaluator.flor": "6"})
    with pytest.raises(ConfigError, match=r"spark\.sparkscale\.evaluator\.flor"):
        construct(BusinessHoursFloorEvaluator, PluginContext(config, config.module("evaluator.")))


def test_realizer_plugin_moves_at_most_max_step_per_call() -> None:
    config = AutoscalerConfig.from_keys({"realizer": "examples.plugins.GradualRealizer",
                                         "realizer.maxStep": "2"})
    cls = load_class("realizer", config.realizer_class, ScalingRealizer, ("realize", "baseline"))
    cluster = SimCluster(cores_per_executor=1, provisioning_delay_s=0.0, initial_executors=1)
    realizer = construct(cls, PluginContext(config, config.module("realizer."), backend=cluster))
    assert isinstance(realizer, GradualRealizer)
    realizer.baseline(1)
    steps = [realizer.realize(7).requested_total for _ in range(4)]
    assert steps == [3, 5, 7, 7]
