"""A driver restart with the SQLite state store: the autoscaler resumes from what it knew.

Two simulated driver lifetimes share one real SQLite file: the first scales, gets a bad scale-up
rolled back and stops; the second starts where the first left off (simulated wall clock)."""

from __future__ import annotations

import json
from pathlib import Path

from test_sim_rollback import CORES, FAULT_AT, _query

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.policy import ScalingPolicy
from sparkscale_listener.policy.rules import _Block
from sparkscale_listener.sim import Simulation
from sparkscale_listener.state.store import SqliteStateStore


def load(t: float) -> float:
    return 800.0 if t < 600 else 1600.0 if t < 2000 else 3200.0


def first_run(db: Path, cfg: AutoscalerConfig) -> tuple[Simulation, int]:
    sim = Simulation(cfg, [_query(load)], 3, seed=1, cores_per_executor=CORES,
                     fail_tasks_on_new_executors=True, faults_from=FAULT_AT,
                     state_store=SqliteStateStore(str(db)), app_name="orders-job")
    result = sim.run(2400)
    (rollback,) = result.events_of("rollback")
    sim.autoscaler.close()
    return sim, rollback.to_executors


def test_restart_keeps_the_healthy_target_and_the_pause(tmp_path: Path) -> None:
    db = tmp_path / "sparkscale.db"
    cfg = AutoscalerConfig(max_executors=20, rollback_pause_s=1800.0)
    before, healthy = first_run(db, cfg)
    assert before.autoscaler.status()["paused"]

    # The new driver starts with whatever the cluster manager gives it (3 executors).
    after = Simulation(cfg, [_query(load)], 3, seed=2, cores_per_executor=CORES,
                       start_time=before.now + 60, state_store=SqliteStateStore(str(db)),
                       app_name="orders-job")
    result = after.run(600)
    status = after.autoscaler.status()
    assert status["initial_executors"] == healthy, "starts at the last healthy target"
    assert status["paused"], "the pause is still in force after the restart"
    assert not [a for a in result.actions if a.action in ("scale_up", "scale_down")]
    assert result.executors_at(after.now) == healthy


def test_restart_does_not_repeat_a_rolled_back_scaling(tmp_path: Path) -> None:
    db = tmp_path / "sparkscale.db"
    cfg = AutoscalerConfig(max_executors=20, rollback_pause_s=None)  # pause until restart
    before, _ = first_run(db, cfg)
    bad_to = [a for a in before.result.actions if a.action == "scale_up"][-1].to_executors

    after = Simulation(cfg, [_query(load)], 3, seed=2, cores_per_executor=CORES,
                       start_time=before.now + 60, state_store=SqliteStateStore(str(db)),
                       app_name="orders-job")
    result = after.run(900)
    assert not after.autoscaler.status()["paused"], "an untilRestart pause ends with the driver"
    repeated = [a for a in result.actions if a.action == "scale_up" and a.to_executors >= bad_to]
    assert not repeated, "the rolled-back scale-up is not repeated"
    held = [d for d in result.decisions if "before the driver restarted" in d.reason]
    assert held, "the decision says why it holds back"


def test_another_application_in_the_same_file_is_not_affected(tmp_path: Path) -> None:
    db = tmp_path / "sparkscale.db"
    cfg = AutoscalerConfig(max_executors=20, rollback_pause_s=1800.0)
    first_run(db, cfg)
    other = Simulation(cfg, [_query(lambda t: 800.0)], 3, seed=3, cores_per_executor=CORES,
                       state_store=SqliteStateStore(str(db)), app_name="clicks-job")
    other.run(300)
    status = other.autoscaler.status()
    assert not status["paused"] and status["initial_executors"] == 3


def test_a_pending_scale_down_keeps_its_wait_across_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "sparkscale.db"
    cfg = AutoscalerConfig(max_executors=20)

    def falling(t: float) -> float:
        return 1600.0 if t < 600 else 200.0

    before = Simulation(cfg, [_query(falling)], 3, seed=1, cores_per_executor=CORES,
                        state_store=SqliteStateStore(str(db)), app_name="orders-job", run_id="app-1")
    before.run(800)
    pending = before.autoscaler.policy.pending_scale_down(before.autoscaler.executor.targets.current)
    # The load fell at 600 s: the scale-down it calls for is pending when the driver dies.
    assert pending is not None and pending[0] >= 600
    assert not [a for a in before.result.actions if a.action == "scale_down" and a.time >= 600]
    since, _ = pending
    executors = before.result.executors_at(before.now)
    before.autoscaler.close()

    after = Simulation(cfg, [_query(falling)], executors, seed=2, cores_per_executor=CORES,
                       start_time=before.now + 30, state_store=SqliteStateStore(str(db)),
                       app_name="orders-job", run_id="app-2")
    result = after.run(600)
    down = next(a for a in result.actions if a.action == "scale_down")
    # The wait started before the restart: the scale-down comes at its end (the first tick after
    # the new driver has a full window), not scaleDownInterval after the restart.
    assert down.time - since < cfg.scale_down_interval_s + cfg.stabilization_interval_s + \
        cfg.metrics_window_s + 2 * cfg.interval_s
    assert down.time - (before.now + 30) < cfg.scale_down_interval_s


def test_ineffective_scale_up_blocks_survive_a_restart() -> None:
    policy = ScalingPolicy()
    policy._blocks.blocked["q1"] = _Block("scale-up 2 -> 4 promised 100 -> 200 rows/s but delivered 101",
                                   target_rate=150.0, since=1000.0)
    restored = ScalingPolicy()
    restored.load_state(json.loads(json.dumps(policy.to_state())))
    assert restored.blocked_queries() == policy.blocked_queries()
    broken = ScalingPolicy()
    broken.load_state({"scaleDownWishes": [{"time": "x"}], "blocked": {"q": {"reason": "r"}}, "checked": [1]})
    assert broken.pending_scale_down(4) is None and broken.blocked_queries() == {}


def test_a_scaling_judged_healthy_is_an_event_naming_the_target_a_rollback_returns_to(tmp_path: Path) -> None:
    cfg = AutoscalerConfig(max_executors=20, rollback_pause_s=1800.0)
    sim = Simulation(cfg, [_query(load)], 3, seed=1, cores_per_executor=CORES,
                     fail_tasks_on_new_executors=True, faults_from=FAULT_AT,
                     state_store=SqliteStateStore(str(tmp_path / "sparkscale.db")), app_name="orders-job")
    result = sim.run(2400)
    (rollback,) = result.events_of("rollback")
    healthy = [e for e in result.events_of("notice")
               if e.situation.startswith("scaling-healthy:") and e.time < rollback.time]
    assert healthy, "the scale-ups before the faults were judged healthy"
    assert healthy[-1].details["healthyTarget"] == rollback.to_executors
    assert "is the last healthy target" in healthy[-1].reason
