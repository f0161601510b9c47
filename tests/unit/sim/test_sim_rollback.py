"""Checkers and rollbacks in the simulator: the real control loop (Autoscaler with the default
checkers and RollbackGuard) against injected faults, and against ordinary noise (simulated time)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.sim import SimQuery, SimResult, Simulation, step_load

CORES = 4
FAULT_AT = 1500.0
BAD_EVENTS = ("rollback", "pause", "stopped", "error")


def _query(load: Callable[[float], float], name: str = "q", **kwargs: object) -> SimQuery:
    return SimQuery(name, load, cost_per_row=0.01, batch_overhead_s=0.3, partitions=200,
                    max_rows_per_batch=20_000.0, **kwargs)  # type: ignore[arg-type]


def _pauses_after_a_failed_rollback(result: SimResult) -> list[str]:
    return [e.reason for e in result.events_of("pause") if "still unhealthy" in e.reason]


@pytest.mark.parametrize("target", ["last", "initial"])
def test_failing_tasks_on_new_executors_roll_back_to_the_configured_target(target: str) -> None:
    # 3 executors for 800 rows/s; the step to 1600 at 600 s gets a healthy scale-up; from 1500 s
    # every new executor is bad, so the scale-up for 3200 rows/s at 2000 s fails its tasks.
    def load(t: float) -> float:
        return 800.0 if t < 600 else 1600.0 if t < 2000 else 3200.0

    cfg = AutoscalerConfig(max_executors=20, rollback_target=target)
    sim = Simulation(cfg, [_query(load)], 3, seed=1, cores_per_executor=CORES,
                     fail_tasks_on_new_executors=True, faults_from=FAULT_AT)
    result = sim.run(3000)

    healthy = result.actions_between(0, FAULT_AT)
    assert healthy and {a.action for a in healthy} == {"scale_up"}
    last_healthy = healthy[-1].to_executors
    assert last_healthy != 3  # else "last" and "initial" could not be told apart
    bad_up, rollback = result.actions_between(FAULT_AT, sim.now)
    assert bad_up.action == "scale_up" and rollback.action == "rollback"
    expected = last_healthy if target == "last" else 3

    (event,) = result.events_of("rollback")
    assert (event.from_executors, event.to_executors) == (bad_up.to_executors, expected)
    assert event.details["checker"] == "taskFailures"
    assert "on executors added by the scaling" in event.reason
    assert event.time - bad_up.time <= 2 * cfg.interval_s

    status = sim.autoscaler.status()
    assert status["paused"] and not status["stopped"]
    assert status["target_executors"] == expected
    # The bad executors look idle (their tasks fail at once), so the rollback removed them at
    # once; busy healthy ones (rolling back to "initial") go when idle. Nothing is applied during
    # the 30-min pause.
    assert result.executors_at(event.time + cfg.interval_s) <= last_healthy
    assert result.final_executors == expected
    assert result.actions[-1] == rollback
    first, *others = result.events_of("pause")
    assert first.time == event.time and "taskFailures" in first.reason
    if target == "last":
        # The rollback itself was watched and judged healthy: no task failed after it.
        assert others == [] and "taskFailures" in status["pause_reason"]
        assert status["healthy_target"] == expected
    else:
        # 3 executors cannot carry 3200 rows/s: the guard may find the rollback to the initial
        # target unhealthy too (throughput fell, backlog grows). It then only reports and pauses:
        # a rollback is never rolled back.
        assert all("still unhealthy after the rollback" in p.reason for p in others)


def test_executors_that_never_register_are_a_capacity_limit_not_a_failed_scaling() -> None:
    # A full YARN queue / a Kubernetes quota: requested executors never come. No rollback, no
    # pause; the target is held at what the cluster gave and more is asked for again later.
    cfg = AutoscalerConfig(max_executors=20, capacity_retry_s=600.0)
    sim = Simulation(cfg, [_query(step_load(500.0, 2000.0, 300.0))], 2, seed=1,
                     cores_per_executor=CORES, executor_start_failure=True)
    result = sim.run(1500)

    up = result.actions[0]
    assert up.action == "scale_up" and up.to_executors > 2
    assert not result.events_of("rollback", "pause", "stopped")
    (capacity, *later) = result.events_of("capacity")
    timeout = cfg.provisioning_timeout_s
    assert timeout <= capacity.time - up.time <= timeout + 2 * cfg.interval_s
    assert capacity.to_executors == 2 and f"gave 2 of {up.to_executors} requested" in capacity.reason
    status = sim.autoscaler.status()
    assert not status["paused"]
    # Held at 2 (the hanging launches cancelled) until the retry, then one more try.
    held = [p for p in result.timeline if capacity.time < p.t < capacity.time + 590]
    assert held and all(p.executors == 2 and p.pending == 0 for p in held)
    retry = [a for a in result.actions if a.action == "scale_up" and a.time > capacity.time]
    assert retry and retry[0].time >= capacity.time + cfg.capacity_retry_s
    assert later and later[0].time > retry[0].time  # the retry found the same limit, reported again
    assert status["capacity_limit"]["executors"] == 2


def test_executors_that_die_at_start_are_rolled_back_at_once() -> None:
    cfg = AutoscalerConfig(max_executors=20)
    sim = Simulation(cfg, [_query(step_load(500.0, 2000.0, 300.0))], 2, seed=1,
                     cores_per_executor=CORES, executor_start_failure=True,
                     executor_start_failure_reason="Command exited with code 1")
    result = sim.run(1200)

    up, rollback = result.actions
    assert up.action == "scale_up" and rollback.action == "rollback"
    assert rollback.time - up.time <= 2 * cfg.interval_s  # no need to wait for the timeout
    (event,) = result.events_of("rollback")
    assert event.to_executors == 2
    assert event.details["checker"] == "executorFailures"
    assert "Command exited with code 1" in event.reason
    status = sim.autoscaler.status()
    assert status["paused"] and "executorFailures" in status["pause_reason"]
    assert result.final_executors == 2
    assert _pauses_after_a_failed_rollback(result) == []


def test_a_query_that_fails_below_n_executors_rolls_the_scale_down_back() -> None:
    # 300 rows/s need 2 executors, but the query dies with fewer than 4.
    cfg = AutoscalerConfig(max_executors=20)
    q = _query(lambda t: 300.0, query_fails_below_executors=4)
    sim = Simulation(cfg, [q], 6, seed=1, cores_per_executor=CORES)
    result = sim.run(1500)

    down, rollback = result.actions
    assert down.action == "scale_down" and down.to_executors < 4
    (event,) = result.events_of("rollback")
    assert (rollback.time, event.from_executors, event.to_executors) == (event.time, down.to_executors, 6)
    assert event.details["checker"] == "queryFailure"
    assert "query 'q' terminated" in event.reason
    assert event.time - down.time <= 2 * cfg.interval_s
    status = sim.autoscaler.status()
    assert status["paused"] and "queryFailure" in status["pause_reason"]
    assert result.final_executors == 6
    assert not result.timeline[-1].queries["q"].active  # a terminated query stays terminated
    # The failure predates the rollback: the rollback itself is not blamed for it.
    assert _pauses_after_a_failed_rollback(result) == []


def test_a_query_that_failed_before_a_scaling_is_not_blamed_on_it_during_a_long_watch() -> None:
    # "b" dies at the start (it needs 7 executors of 6). Without heap readings the heapUsage
    # checker stays pending, so a scaling is watched for twice the checkers' window: the sample
    # before the scaling must still be there at the end of the watch, or the old failure looks new.
    cfg = AutoscalerConfig(max_executors=20)
    a = _query(lambda t: 300.0, name="a")
    b = _query(lambda t: 100.0, name="b", query_fails_below_executors=7)
    sim = Simulation(cfg, [a, b], 6, seed=1, cores_per_executor=CORES, heap_used_ratio=None)
    result = sim.run(1500)
    assert not result.timeline[0].queries["b"].active
    downs = [x for x in result.actions if x.action == "scale_down"]
    assert downs and downs[0].time + 2 * sim.guard.window_s() <= sim.now
    assert result.events_of(*BAD_EVENTS) == []


def test_repeated_rollbacks_stop_automatic_scaling_until_resume() -> None:
    # Every new executor is bad and the load needs 6: each scale-up is rolled back; after a short
    # pause the autoscaler tries again, and the third rollback within the hour stops it.
    cfg = AutoscalerConfig(max_executors=20, rollback_pause_s=120.0, rollback_max=3,
                           rollback_window_s=3600.0)
    sim = Simulation(cfg, [_query(lambda t: 1600.0)], 2, seed=1, cores_per_executor=CORES,
                     fail_tasks_on_new_executors=True)
    result = sim.run(2400)

    rollbacks = result.events_of("rollback")
    assert len(rollbacks) == 3
    assert all(e.to_executors == 2 and e.details["checker"] == "taskFailures" for e in rollbacks)
    (stopped,) = result.events_of("stopped")
    assert stopped.time == rollbacks[-1].time
    assert [e.kind for e in result.events_of("pause", "stopped")] == ["pause", "pause", "stopped"]
    status = sim.autoscaler.status()
    assert status["stopped"] and status["paused"]
    assert "3 rollbacks" in status["pause_reason"]
    # Stopped, not paused: nothing is applied for the remaining half hour, long after the pause.
    assert result.actions[-1].action == "rollback" and result.actions[-1].time == stopped.time
    later = [d for d in result.decisions if d.time > stopped.time]
    assert later and all(d.reason.startswith("paused") for d in later)

    # SimResult.decisions are the autoscaler's own decisions (it keeps the last 1000).
    assert [(d["time"], d["action"], d["from_executors"], d["to_executors"], d["applied"])
            for d in sim.autoscaler.decisions()] == [
        (d.time, d.action, d.from_executors, d.to_executors, d.applied) for d in result.decisions]

    sim.autoscaler.resume()
    status = sim.autoscaler.status()
    assert not status["paused"] and not status["stopped"]
    assert result.events[-1].kind == "resume"
    resumed_at = sim.now
    result = sim.run(600)
    after = result.actions_between(resumed_at, sim.now)
    assert after and after[0].action == "scale_up"
    # resume() forgets past rollbacks: the next one pauses, it does not stop.
    kinds = [e.kind for e in result.events if e.time > resumed_at and e.kind in ("pause", "stopped")]
    assert kinds[0] == "pause"


def _wave(t: float) -> float:
    return 1000.0 + 700.0 * math.sin(2 * math.pi * t / 5400.0)


def _steps(t: float) -> float:
    return [600.0, 1800.0, 900.0, 2400.0, 500.0][int(t // 2880) % 5]


def _one_query_wave(seed: int) -> Simulation:
    return Simulation(AutoscalerConfig(max_executors=20),
                      [_query(_wave, noise=0.2, noise_period_s=30.0)], 4, seed=seed,
                      cores_per_executor=CORES)


def _two_queries_steps(seed: int) -> Simulation:
    a = SimQuery("a", _steps, cost_per_row=0.01, batch_overhead_s=0.3, partitions=64,
                 max_rows_per_batch=20_000.0, noise=0.2, noise_period_s=30.0)
    b = SimQuery("b", lambda t: 200.0, cost_per_row=0.03, batch_overhead_s=1.0, partitions=64,
                 trigger_interval_s=10.0, max_rows_per_batch=20_000.0, noise=0.2, noise_period_s=20.0)
    return Simulation(AutoscalerConfig(max_executors=20), [a, b], 3, seed=seed,
                      cores_per_executor=CORES, kill_delay_s=5.0)


def _rate_source_wave(seed: int) -> Simulation:
    q = SimQuery("q", _wave, cost_per_row=0.01, batch_overhead_s=0.5, partitions=200,
                 trigger_interval_s=5.0, reports_backlog=False, noise=0.2, noise_period_s=30.0)
    return Simulation(AutoscalerConfig(max_executors=20), [q], 2, seed=seed, cores_per_executor=CORES)


@pytest.mark.parametrize("scenario", [_one_query_wave, _two_queries_steps, _rate_source_wave])
def test_no_rollback_under_ordinary_noise_over_hours(scenario: Callable[[int], Simulation]) -> None:
    sim = scenario(11)
    result = sim.run(4 * 3600)
    ups = [a for a in result.actions if a.action == "scale_up"]
    downs = [a for a in result.actions if a.action == "scale_down"]
    assert ups and downs  # the checkers judged scalings both ways
    assert result.events_of(*BAD_EVENTS) == []
    status = sim.autoscaler.status()
    assert not status["paused"] and status["errors"] == 0
    # Every watched scaling but the latest ones, still watched, was judged healthy (a scale-down can
    # follow the one before it within the checkers' 5 minutes: the last two).
    latest = result.actions[-2:]
    assert status["healthy_target"] in {n for a in latest for n in (a.from_executors, a.to_executors)}


def test_an_executor_lost_while_a_scale_up_provisions_is_not_a_capacity_limit() -> None:
    # Executors take 100 s to start; 50 s into a scale-up's wait an original executor dies from
    # outside. Its replacement comes after provisioningTimeout (120 s): the cluster had room for
    # all that was asked, so no capacity limit is held (it would block scale-ups for
    # capacityRetryInterval and remove the replacement as one beyond the target).
    cfg = AutoscalerConfig(max_executors=20, provisioning_timeout_s=120.0)
    sim = Simulation(cfg, [_query(step_load(500.0, 2000.0, 300.0))], 2, provisioning_delay_s=100.0,
                     seed=1, cores_per_executor=CORES)
    while not sim.result.actions and sim.now < 1200:
        sim.run(cfg.interval_s)
    (up,) = sim.result.actions
    assert up.action == "scale_up" and up.to_executors > 2
    sim.run(up.time + 50.0 - sim.now)
    original = min(sim.cluster.executor_ids(), key=int)
    sim.cluster.lose(original, "Command exited with code 137")
    result = sim.run(400.0)

    assert not result.events_of("capacity"), result.events_of("capacity")
    status = sim.autoscaler.status()
    assert status["capacity_limit"] is None and not status["paused"]
    assert original not in sim.cluster.executor_ids()
    assert sim.cluster.live_count >= up.to_executors  # the replacement stayed
