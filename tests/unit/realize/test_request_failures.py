"""A cluster manager that fails requests for a while (a standalone Master restarting, a resource
manager unreachable): the executor reports it, retries with backoff instead of every tick, never
raises, removes nothing meanwhile, and reaches the wanted target once requests succeed again."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from harness import LoopHarness, cfg, sample
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.realize.realizer import ClusterBackend, ExecutorRealizer
from sparkscale_listener.sim import SimCluster, SimQuery, Simulation, step_load

UNAVAILABLE = "cluster-manager-unavailable"
AVAILABLE = "cluster-manager-available"


class UnreachableWhile(ClusterBackend):
    """The simulated cluster's executor API, whose cluster-manager calls raise (as Py4J errors
    do) between ``down[0]`` and ``down[1]``. Listing executors stays local to the driver."""

    def __init__(self, cluster: SimCluster, down: tuple[float, float]) -> None:
        self.cluster = cluster
        self.down = down
        self.failed_at: list[float] = []

    def _reach(self) -> None:
        if self.down[0] <= self.cluster.now < self.down[1]:
            self.failed_at.append(self.cluster.now)
            raise RuntimeError("org.apache.spark.SparkException: Exception thrown in awaitResult "
                               "<- java.io.IOException: Connection refused: /127.0.0.1:7077")

    def executor_ids(self) -> list[str]:
        return self.cluster.executor_ids()

    def running_tasks(self) -> dict[str, int]:
        return self.cluster.running_tasks()

    def request_total(self, total: int) -> bool:
        self._reach()
        return self.cluster.request_total(total)

    def kill(self, executor_ids: Sequence[str], force: bool = False) -> list[str]:
        self._reach()
        return self.cluster.kill(executor_ids, force)


def test_backoff_doubles_from_twice_the_interval_up_to_the_provisioning_timeout() -> None:
    harness = LoopHarness(cfg(interval="10s", provisioningTimeout="120s"))
    waits = [harness.autoscaler.executor.requests.backoff_s(n) for n in range(1, 8)]
    assert waits == [20, 40, 80, 120, 120, 120, 120]
    # A provisioning timeout shorter than the interval never makes it retry faster than a tick.
    short = LoopHarness(cfg(interval="10s", provisioningTimeout="5s"))
    assert short.autoscaler.executor.requests.backoff_s(1) == 10


def test_a_failing_baseline_is_retried_with_backoff_and_nothing_is_removed_meanwhile() -> None:
    h = LoopHarness(cfg(initialExecutors="2", interval="10s", provisioningTimeout="120s"))
    h.realizer.refuse = True
    calls_at: dict[float, list] = {}

    def tick(live: int) -> None:
        before = len(h.realizer.calls)
        h.tick(sample(h.clock.now + 10, live=live))
        calls_at[h.clock.now] = h.realizer.calls[before:]

    tick(2)  # t=10: the baseline request fails
    for _ in range(5):
        tick(3)  # an extra executor: not removed while requests fail
    h.realizer.refuse = False
    for _ in range(3):
        tick(3)
    made = {t: c for t, c in calls_at.items() if c and t <= 80}
    # The baseline at 10, retries at 10+20 and 30+40 (accepted), then the converge step removes
    # the extra executor on the next tick, not before (and again later: the harness's cluster
    # never removes it).
    assert made == {10: [("baseline", 2)], 30: [("baseline", 2)], 70: [("baseline", 2)],
                    80: [("realize", 2, ())]}, made
    unavailable = [e for e in h.recorded.events if e.situation == UNAVAILABLE]
    assert [e.severity for e in unavailable] == ["error", "warning"]
    assert "refused 2" in unavailable[0].reason and "next attempt in 20s" in unavailable[0].reason
    (back,) = [e for e in h.recorded.events if e.situation == AVAILABLE]
    assert back.time == 70 and "2 failed attempt(s)" in back.reason
    assert not [e for e in h.recorded.events if e.kind in ("error", "rollback", "pause")]
    status = h.autoscaler.status()
    assert status["errors"] == 0 and not status["paused"] and status["target_executors"] == 2


def _outage(down: tuple[float, float], duration: float = 1500.0) -> tuple[Simulation, UnreachableWhile]:
    config = AutoscalerConfig(max_executors=20)
    backends: list[UnreachableWhile] = []

    def realizer(cluster: SimCluster) -> ExecutorRealizer:
        backends.append(UnreachableWhile(cluster, down))
        return ExecutorRealizer(backends[-1], config.min_executors)

    query = SimQuery("q", step_load(500.0, 2000.0, 300.0), cost_per_row=0.01, batch_overhead_s=0.3,
                     partitions=200, max_rows_per_batch=20_000.0)
    # strict: an "error" event (an exception escaping into the control loop) fails the run.
    sim = Simulation(config, [query], 2, seed=1, cores_per_executor=4, realizer=realizer)
    sim.run(duration)
    return sim, backends[0]


def test_a_scale_up_wanted_while_the_cluster_manager_is_down_backs_off_and_lands_after() -> None:
    down = (250.0, 700.0)
    sim, backend = _outage(down)
    result = sim.result
    config = sim.config

    # Requests during the outage: not one a tick, but at the backoff's growing gaps.
    tries = backend.failed_at
    gaps = [b - a for a, b in itertools.pairwise(tries)]
    assert len(tries) >= 3 and gaps == sorted(gaps), gaps
    assert all(g >= 2 * config.interval_s for g in gaps)
    ticks_down = (down[1] - tries[0]) / config.interval_s
    assert len(tries) < ticks_down / 3
    # Nothing applied while down; every failure reported under one situation.
    assert not [a for a in result.actions if down[0] <= a.time < down[1]]
    failures = [e for e in result.events if e.situation == UNAVAILABLE]
    assert failures[0].severity == "error" and "scale_up 2 -> " in failures[0].reason
    assert len(failures) <= len(tries)
    # Once the cluster manager answers: one retry (within one backoff), then the scale-up.
    (back,) = [e for e in result.events if e.situation == AVAILABLE]
    longest = sim.autoscaler.executor.requests.backoff_s(99)
    assert down[1] <= back.time <= down[1] + longest + config.interval_s
    up = next(a for a in result.actions if a.time >= down[1])
    assert up.action == "scale_up" and up.from_executors == 2 and up.time <= back.time + config.interval_s
    assert not result.events_of("rollback", "pause", "stopped", "error")
    status = sim.autoscaler.status()
    assert status["errors"] == 0 and not status["paused"]
    assert result.final_executors > 2


def test_an_outage_with_nothing_wanted_makes_no_request_and_no_event() -> None:
    # The load steps up at 300 s; an outage before it (100-250 s) meets no request at all.
    sim, backend = _outage((100.0, 250.0), duration=900.0)
    assert backend.failed_at == []
    assert not [e for e in sim.result.events if e.situation in (UNAVAILABLE, AVAILABLE)]
    assert sim.result.final_executors > 2
