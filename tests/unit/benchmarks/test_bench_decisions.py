"""The decision benchmark (benchmarks/bench_decisions.py): its figures on hand-made timelines, each
alternative policy's rule on a hand-made input, the simulator's fixed task cost, and a small run.
No timing thresholds and nothing about which policy wins."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from benchmarks.alternatives import (
    DStreamsAllocation,
    OccupancyEvaluator,
    OccupancyRule,
    SparkDynamicAllocation,
)
from benchmarks.bench_decisions import (
    DEFAULTS,
    POLICIES,
    Load,
    markdown,
    oracle_executors,
    query,
    run,
    simulate,
    sparkscale_config,
    step,
)
from benchmarks.figures import Timeline, figures, flaps
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.options import ConfigError
from sparkscale_listener.config.plugins import PluginContext, construct, load_class
from sparkscale_listener.evaluator import MetricEvaluator
from sparkscale_listener.sim import (
    BatchView,
    SimCluster,
    SimQuery,
    Simulation,
    smallest_sufficient_executors,
)


def timeline(executors: Sequence[float], lag: Sequence[float] | None = None,
             actions: Sequence[tuple[float, int, int]] = ()) -> Timeline:
    n = len(executors)
    return Timeline([10.0 * i for i in range(n)], list(executors), [100.0] * n,
                    list(lag) if lag is not None else [0.0] * n, list(actions))


# -- figures -----------------------------------------------------------------------------------


def test_executor_seconds_of_a_step_hold_each_sample_until_the_next() -> None:
    run_ = timeline([2, 2, 4, 4, 4])  # t = 0..40: 2 executors for 20 s, 4 for 20 s
    f = figures(run_, [2, 2, 2, 2, 2], backlog_threshold_s=60, scale_down_interval_s=300)
    assert f["duration_s"] == 40
    assert f["executor_s"] == 2 * 20 + 4 * 20
    assert f["oracle_executor_s"] == 80
    assert f["executor_s_vs_oracle"] == pytest.approx(1.5)
    assert f["mean_executors"] == pytest.approx(3.0)
    assert f["under_oracle_share"] == 0


def test_lag_share_counts_time_above_the_threshold_only() -> None:
    run_ = timeline([1] * 5, lag=[0, 61, 60, 120, 500])  # the last sample holds no time
    f = figures(run_, [1] * 5, backlog_threshold_s=60, scale_down_interval_s=300)
    assert f["lag_over_threshold_share"] == pytest.approx(20 / 40)
    assert f["max_lag_s"] == 500


def test_opposite_actions_closer_than_the_scale_down_interval_are_flaps() -> None:
    assert flaps([(0, 2, 4), (100, 4, 2)], 300) == 1
    assert flaps([(0, 2, 4), (400, 4, 2)], 300) == 0  # far enough apart
    assert flaps([(0, 2, 4), (100, 4, 6)], 300) == 0  # same direction
    assert flaps([(0, 2, 4), (50, 4, 4), (100, 4, 2), (150, 2, 3)], 300) == 2  # no-op skipped
    f = figures(timeline([2, 4, 2], actions=[(0, 2, 4), (10, 4, 2)]), [2, 2, 2], 60, 300)
    assert (f["actions"], f["scale_ups"], f["scale_downs"], f["flaps"]) == (2, 1, 1, 1)


def test_convergence_counts_actions_until_executors_stay_within_one_of_the_oracle() -> None:
    # Step at t=10: the oracle goes 2 -> 8; executors 2 -> 5 (t=20) -> 8 (t=40); a wobble to 7
    # at t=50 is within 1.
    run_ = timeline([2, 2, 5, 5, 8, 7, 8], actions=[(10, 2, 5), (30, 5, 8)])
    f = figures(run_, [2, 8, 8, 8, 8, 8, 8], 60, 300, steps=[10])
    assert f["step_0_time_to_converge_s"] == 30  # first within 1 at t=40, and stays
    assert f["step_0_actions"] == 2
    assert f["step_0_actions_after"] == 2
    assert f["max_actions_to_converge"] == 2 and f["steps_converged"] == 1


def test_a_step_never_converged_is_nan_and_steps_are_measured_up_to_the_next() -> None:
    run_ = timeline([2, 2, 2, 6, 6, 6], actions=[(25, 2, 6)])
    oracle = [2, 6, 6, 6, 2, 2]  # up at t=10, down at t=40; the executors never come down
    f = figures(run_, oracle, 60, 300, steps=[10, 40])
    assert f["step_0_time_to_converge_s"] == 20  # within 1 from t=30 until the next step
    assert f["step_0_actions"] == 1
    assert math.isnan(f["step_1_actions"]) and math.isnan(f["step_1_time_to_converge_s"])
    assert f["step_1_actions_after"] == 0
    assert math.isnan(f["max_time_to_converge_s"]) and f["steps_converged"] == 1


def test_timeline_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError):
        Timeline([0, 1], [1], [1, 1], [0, 0], [])


# -- the oracle --------------------------------------------------------------------------------


def test_oracle_is_the_simulator_oracle_without_fixed_costs() -> None:
    for rate in (100.0, 2000.0, 9000.0):
        plain = SimQuery("q", lambda t, rate=rate: rate, cost_per_row=0.002, partitions=32,
                         trigger_interval_s=10.0)
        assert oracle_executors([plain], {"q": rate}, 2, 0.7, 100) == \
            smallest_sufficient_executors([plain], {"q": rate}, 2, 0.7)


def test_oracle_counts_the_fixed_task_time_per_trigger() -> None:
    q = replace(query("q", lambda t: 100.0, 0.0, 100.0), task_overhead_s=0.5, executor_overhead_s=1.0)
    # Sized on its trigger: 100 x 0.002 + (32 x 0.5 + E x 1.0) / 10 slot-s/s at 0.7: 2.71 slots for
    # E = 1 (> 2), 2.86 for E = 2 (<= 4); without the fixed time 0.29 slots, 1 executor.
    assert smallest_sufficient_executors([q], {"q": 100.0}, 2, 0.7, 20) == 2
    assert smallest_sufficient_executors([replace(q, task_overhead_s=0.0, executor_overhead_s=0.0)],
                                         {"q": 100.0}, 2, 0.7, 20) == 1
    assert smallest_sufficient_executors([q], {"q": 100.0}, 2, 0.7, 1) == 1  # capped at maxExecutors


def test_the_benchmarks_oracle_counts_the_fixed_task_time_per_period_the_lag_allows() -> None:
    # A 10 s trigger, shorter than half of backlogThreshold (30 s): batches may run back to back,
    # 30 s apart at the arrivals over the target and 15 s apart at the arrivals (a quarter of it,
    # longer than the trigger), the fixed time paid every 30 s. On E executors of 2 cores a batch of
    # 15 s of arrivals (3 s of task time) and the 32 + E s fixed must end within 15 s:
    # 0.5 + (3 + 33) / 2 = 18.5 s on 1, 0.5 + (3 + 34) / 4 = 9.75 s on 2.
    q = replace(query("q", lambda t: 100.0, 0.0, 100.0), task_overhead_s=1.0, executor_overhead_s=1.0)
    assert oracle_executors([q], {"q": 100.0}, 2, 0.7, 20) == 2
    assert oracle_executors([replace(q, task_overhead_s=0.0, executor_overhead_s=0.0)],
                            {"q": 100.0}, 2, 0.7, 20) == 1
    # The same trigger sized on the trigger (backlogThreshold 2 trigger intervals or less): more.
    assert smallest_sufficient_executors([q], {"q": 100.0}, 2, 0.7, 20, backlog_threshold_s=20.0) > 2


# -- the simulator's additions -----------------------------------------------------------------


def test_every_batch_pays_the_fixed_task_time_per_task_and_per_executor() -> None:
    q = SimQuery("q", lambda t: 100.0, cost_per_row=0.001, batch_overhead_s=0.0, partitions=4,
                 trigger_interval_s=10.0, task_overhead_s=0.2, executor_overhead_s=0.5)
    sim = Simulation(AutoscalerConfig(), [q], initial_executors=3, cores_per_executor=2,
                     provisioning_delay_s=0.0)
    sim.run(60.0)
    m = sim.sample().queries["q"]
    assert m.batches >= 5
    # 4 tasks land on min(3 executors, ceil(4 / 2)) = 2 executors: 4 x 0.2 + 2 x 0.5 = 1.8 s.
    fixed_s = (m.batch_busy_ms / 1000.0 - m.input_rows * q.cost_per_row) / m.batches
    assert fixed_s == pytest.approx(1.8, abs=1e-3)


def test_launches_past_the_commit_time_survive_a_lower_target() -> None:
    cluster = SimCluster(1, provisioning_delay_s=30.0, initial_executors=1, launch_commit_s=2.0)
    cluster.request_total(3)  # two launches at t=0
    cluster.advance(5.0)
    cluster.request_total(4)  # one more at t=5
    cluster.advance(6.0)
    cluster.request_total(1)  # the t=5 launch is cancelled, the t=0 ones are committed
    assert cluster.pending_count == 2
    cluster.advance(30.0)
    assert cluster.live_count == 3
    plain = SimCluster(1, provisioning_delay_s=30.0, initial_executors=1)
    plain.request_total(3)
    plain.advance(5.0)
    plain.request_total(1)
    assert plain.pending_count == 0  # the original behaviour: every pending launch is cancelled


# -- the alternatives' rules on hand-made input ------------------------------------------------


@dataclass
class FakeCluster:
    live: list[str]
    busy: set[str] = field(default_factory=set)
    target: int = 0
    pending: int = 0

    def __post_init__(self) -> None:
        self.target = len(self.live)

    @property
    def live_count(self) -> int:
        return len(self.live)

    @property
    def pending_count(self) -> int:
        return self.pending

    def executor_ids(self) -> list[str]:
        return list(self.live)

    def running_tasks(self) -> dict[str, int]:
        return {e: int(e in self.busy) for e in self.live}

    def request_total(self, total: int) -> bool:
        self.target = total
        self.pending = max(0, total - len(self.live))
        return True

    def kill(self, ids: Sequence[str], force: bool = False) -> list[str]:
        killed = [e for e in ids if e in self.live and (force or e not in self.busy)]
        self.live = [e for e in self.live if e not in killed]
        self.target -= len(killed)
        self.pending = max(0, self.target - len(self.live))
        return killed


@dataclass
class FakeSim:
    cluster: FakeCluster
    now: float = 0.0
    batches: list[BatchView] = field(default_factory=list)
    queries: tuple[SimQuery, ...] = (SimQuery("q", lambda t: 0.0, 0.001, batch_overhead_s=0.0),)

    def running_batches(self) -> list[BatchView]:
        return self.batches


def test_dynamic_allocation_sizes_on_tasks_per_executor() -> None:
    da = SparkDynamicAllocation(cores_per_executor=4, task_cpus=2, executor_allocation_ratio=0.5)
    assert da.tasks_per_executor == 2
    assert da.max_needed(pending=7, running=3) == math.ceil(10 * 0.5 / 2)


def test_dynamic_allocation_ramps_up_exponentially_while_tasks_stay_pending() -> None:
    sim = FakeSim(FakeCluster(["1"]))
    da = SparkDynamicAllocation(initial_executors=1, max_executors=50, cores_per_executor=1)
    # A stage of 40 tasks submitted at t=0, one running: 39 pending for 10 s.
    sim.batches = [BatchView("q", 0.0, 40, 40, 1.0)]
    targets = []
    for t in range(11):
        sim.now = float(t)
        da(sim)  # type: ignore[arg-type]
        targets.append(da.target)
    # Nothing before the 1 s backlog timeout, then +1, +2, +4, +8 every second (the live
    # executors stay 1: the launches are pending), up to the 40 tasks' need.
    assert targets[:6] == [1, 2, 4, 8, 16, 32]
    assert targets[6:] == [40] * 5
    assert [a[2] for a in da.actions][:3] == [2, 4, 8]


def test_dynamic_allocation_lowers_its_target_without_tasks_and_removes_only_idle_executors() -> None:
    sim = FakeSim(FakeCluster(["1", "2", "3", "4"]))
    da = SparkDynamicAllocation(initial_executors=4, min_executors=1, executor_idle_timeout_s=60.0)
    sim.batches = [BatchView("q", 0.0, 4, 4, 4.0)]  # 4 tasks on 4 executors: everyone busy
    da(sim)  # type: ignore[arg-type]
    assert da.target == 4
    sim.batches = []
    sim.now = 1.0
    da(sim)  # type: ignore[arg-type]
    assert da.target == 1  # no task pending or running: the target drops to minExecutors
    assert sim.cluster.live_count == 4 and not da.actions  # nothing killed, no action
    sim.now = 59.0
    da(sim)  # type: ignore[arg-type]
    assert sim.cluster.live_count == 4  # idle for 59 s only
    sim.now = 60.0
    da(sim)  # type: ignore[arg-type]
    assert sim.cluster.live_count == 1  # idle 60 s: removed down to max(minExecutors, target)
    assert sim.cluster.target == 1
    assert da.actions == [(60.0, 4, 1)]


def test_dstreams_rule_adds_round_ratio_executors_and_kills_one() -> None:
    def after(ratio: float, live: int = 4, minimum: int = 1, maximum: int = 10) -> int:
        sim = FakeSim(FakeCluster([str(i) for i in range(1, live + 1)]))
        rule = DStreamsAllocation(min_executors=minimum, max_executors=maximum)
        rule.manage(sim, ratio)  # type: ignore[arg-type]
        return sim.cluster.live_count + sim.cluster.pending_count

    assert after(0.9) == 5  # at scalingUpRatio: max(round(0.9), 1) = 1 more
    assert after(1.4) == 5
    assert after(2.5) == 7  # Scala rounds half up
    assert after(9.0, maximum=10) == 10  # capped at maxExecutors
    assert after(0.5) == 4  # between the ratios: nothing
    assert after(0.3) == 3  # at scalingDownRatio: one executor killed
    assert after(0.1, live=1) == 1  # never below minExecutors


def test_occupancy_rule_targets_executors_times_occupancy_outside_its_band() -> None:
    rule = OccupancyRule(low=0.5, high=1.0, min_executors=1, max_executors=10)
    assert rule.target_for(4, 1.5) == 6
    assert rule.target_for(4, 0.7) is None and rule.target_for(4, 1.0) is None
    assert rule.target_for(4, 0.3) == 2  # ceil(1.2)
    assert rule.target_for(4, 0.01) == 1
    assert rule.target_for(8, 3.0) == 10
    sim = FakeSim(FakeCluster(["1", "2", "3", "4"], busy={"4"}))
    rule.next_tick = 0.0
    rule.occupancy = lambda before, now: 0.3  # type: ignore[method-assign]
    sim.sample = lambda: None  # type: ignore[attr-defined]
    rule(sim)  # type: ignore[arg-type]
    assert sim.cluster.live == ["1", "4"]  # the newest idle ones went (4 is busy)
    assert sim.cluster.target == 2


# -- the benchmark at a small scale ------------------------------------------------------------


def test_the_benchmark_runs_every_policy_and_writes_a_table() -> None:
    load = Load("tiny", "tiny step", (query("q", step(1000.0, 2000.0, 300.0), 0.05, 2000.0),),
                duration_s=600.0, steps=(300.0,))
    runs = [run(load, policy) for policy in POLICIES]
    for r in runs:
        f = r.figures
        assert f["duration_s"] > 500
        assert f["executor_s"] > 0 and f["oracle_executor_s"] > 0
        assert 0.0 <= f["lag_over_threshold_share"] <= 1.0
        assert f["failed_tasks"] == 0
        assert "step_0_actions_after" in f
    static = next(r for r in runs if r.policy == "static-peak")
    assert static.figures["actions"] == 0 and set(static.timeline.executors) == {max(static.oracle)}
    text = markdown(runs, "test", 1.0)
    assert text.count("| tiny |") == len(POLICIES)


def test_sparkscale_runs_at_another_utilization_target_by_name_and_a_bad_name_fails() -> None:
    config = sparkscale_config("sparkscale-u0.85")
    assert config is not None and config.utilization_target == 0.85
    assert config.utilization_max == DEFAULTS.utilization_max
    assert sparkscale_config("sparkscale-u1").utilization_max == 1.0  # type: ignore[union-attr]
    assert sparkscale_config("sparkscale") == DEFAULTS and sparkscale_config("occupancy") is None
    for bad in ("sparkscale-u0", "sparkscale-u1.5", "sparkscale-ux"):
        with pytest.raises(ValueError, match=bad):
            sparkscale_config(bad)
    load = Load("tiny", "tiny", (query("q", lambda t: 1000.0, 0.05, 2000.0),), duration_s=60.0)
    with pytest.raises(ValueError, match="unknown policy 'sparkscale-fast'"):
        simulate(load, "sparkscale-fast")


# -- the occupancy rule as sparkscale's evaluator (real Spark's alternative) --------------------


def test_occupancy_evaluator_loads_by_class_path_and_rejects_a_bad_key() -> None:
    def build(**keys: str) -> object:
        cfg = AutoscalerConfig.from_keys({"evaluator": "benchmarks.alternatives.OccupancyEvaluator", **keys})
        cls = load_class("evaluator", cfg.evaluator_class, MetricEvaluator, ("evaluate",))
        return construct(cls, PluginContext(cfg, cfg.module("evaluator.")))

    assert build(**{"evaluator.interval": "6s"}).interval_s == 6.0  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"evaluator\.low"):
        build(**{"evaluator.low": "1.5"})


def test_occupancy_evaluator_sizes_by_executors_times_occupancy_at_its_own_pace() -> None:
    """The real autoscaler with the rule as its evaluator, in the simulator: a query whose batches
    take more than twice its trigger on 2 executors is scaled up on the rule's figure, and only
    once the rule's interval has passed."""
    cfg = AutoscalerConfig.from_keys({"interval": "5s", "maxExecutors": "10", "evaluator.interval": "30s"})
    evaluator = OccupancyEvaluator(PluginContext(cfg, cfg.module("evaluator.")))
    q = SimQuery("q", lambda t: 200.0, cost_per_row=0.02, batch_overhead_s=0.2, partitions=16,
                 trigger_interval_s=2.0)
    sim = Simulation(cfg, [q], initial_executors=2, provisioning_delay_s=0.0, seed=1, cores_per_executor=1,
                     evaluator=evaluator)
    result = sim.run(80.0)
    ups = [a for a in result.actions if a.to_executors > a.from_executors]
    assert ups, [d.reason for d in result.decisions][-5:]
    first = ups[0]
    assert first.time >= 30.0  # not before the rule's first look
    assert first.from_executors == 2 and first.to_executors >= 4  # 200 rows x 0.02 s on 2 slots: > 2x
    assert "occupancy" in first.reason
