"""ScalingPolicy on hand-built evaluations, and the policy's helpers (scaling_record, excluded periods)."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.decisions import (
    Decision,
    Evaluation,
    ForecastSizing,
    Outcome,
    Prediction,
    QueryEvaluation,
    ScalingContext,
    ScalingRecord,
)
from sparkscale_listener.model import BatchCost
from sparkscale_listener.policy import ScalingPolicy, in_excluded_period, scaling_record
from sparkscale_listener.realize.provisioning import next_window_start

CORES = 4
CFG = AutoscalerConfig(min_executors=1, max_executors=20, scale_down_interval_s=300.0)


def qe(qid: str = "q", *, input_rate: float = 100.0, target_rate: float | None = None,
       catch_up: float = 0.0, required: float = 4.0, backlog: float | None = 0.0,
       backlog_mode: bool = False, capped: bool = False, cap: int | None = None) -> QueryEvaluation:
    return QueryEvaluation(
        query_id=qid, name=qid, input_rate=input_rate, backlog=backlog, backlog_growth_rate=0.0,
        target_rate=input_rate if target_rate is None else target_rate, catch_up_rate=catch_up,
        slot_seconds_per_row=0.01, required_slots=required, utilization=None, parallelism_cap=cap,
        capped=capped, backlog_mode=backlog_mode, required_executors=math.ceil(required / CORES - 1e-9))


def evaluation(now: float, *, current: int, required_slots: float, utilization: float | None,
               cfg: AutoscalerConfig = CFG, backlog_mode: bool = False, ready: bool = True,
               queries: dict[str, QueryEvaluation] | None = None, reason: str = "eval") -> Evaluation:
    raw = math.ceil(required_slots / CORES - 1e-9) if required_slots > 0 else 0
    rec = min(max(raw, cfg.min_executors), cfg.max_executors)
    if queries is None:
        queries = {"q": qe(required=required_slots, backlog_mode=backlog_mode)}
    return Evaluation(time=now, ready=ready, current_executors=current,
                      recommended_executors=rec if ready else current,
                      required_slots=required_slots, utilization=utilization,
                      backlog_mode=backlog_mode, queries=queries, reason=reason)


def context(now: float, current: int, cfg: AutoscalerConfig = CFG, *, live: int | None = None,
            pending: int = 0, window_start: float = 0.0,
            last: ScalingRecord | None = None) -> ScalingContext:
    return ScalingContext(now=now, config=cfg, current_target=current,
                          live_executors=current if live is None else live,
                          pending_executors=pending, cores_per_executor=CORES,
                          window_start=window_start, provisioning_time_s=0.0, last_scaling=last)


def decide(policy: ScalingPolicy, now: float, current: int, required_slots: float,
           cfg: AutoscalerConfig = CFG, **kw: object) -> Decision:
    util = required_slots * 0.7 / (current * CORES)  # the evaluator's relation at target 0.7
    ev = evaluation(now, current=current, required_slots=required_slots, utilization=util, cfg=cfg,
                    **kw)  # type: ignore[arg-type]
    return policy.decide(ev, context(now, current, cfg))


def test_not_ready_does_nothing_and_says_why() -> None:
    ev = evaluation(0, current=4, required_slots=0, utilization=None, ready=False,
                    reason="not ready: collecting metrics: 20s of the 60s window")
    d = ScalingPolicy().decide(ev, context(0, 4))
    assert d.action == "none" and d.to_executors == 4 and not d.applied
    assert "collecting metrics" in d.reason


def test_between_the_target_and_utilization_max_does_nothing() -> None:
    # 16 slots, utilization 0.8: above the target 0.7 (which asks for 5 executors) but not above
    # utilization.max 0.9: no scale-up yet.
    d = decide(ScalingPolicy(), 0, 4, required_slots=0.8 * 16 / 0.7)
    assert d.action == "none"
    assert "between the target 0.7 and utilization.max=0.9: inside the band, no scale-up yet" in d.details


def test_scale_up_above_the_band() -> None:
    d = decide(ScalingPolicy(), 0, 4, required_slots=26.0)  # util 1.14 -> 7 executors
    assert (d.action, d.from_executors, d.to_executors, d.limited_by) == ("scale_up", 4, 7, None)
    assert d.reason.startswith("scale up 4 -> 7: ") and "driven by utilization" in d.details


def test_scale_up_is_limited_by_the_max_factor() -> None:
    d = decide(ScalingPolicy(), 0, 2, required_slots=60.0)  # needs 15, at most 2 x 4 = 8
    assert (d.action, d.to_executors, d.limited_by) == ("scale_up", 8, "scaleUp.maxFactor")
    assert "scaleUp.maxFactor=4" in d.details and "load needs 15" in d.details


def test_a_scale_up_cut_short_by_the_max_factor_follows_through_inside_the_band() -> None:
    # 1 -> 4 of the 5 a step needed: on 4 the utilization is inside the band (0.8), which alone
    # holds; the cut-short scale-up goes on to 5 all the same, once.
    cost = BatchCost(0.2, 0.0, 0.0, 0.001, 64, 64, CORES, 1.0, 0.0, 10, True)
    short = ScalingRecord(time=100.0, action="scale_up", from_executors=1, to_executors=4, reason="r",
                          predictions={"q": Prediction("q", 1000.0, 1000.0, 5, 4.0, 0.9, 1200.0, None, cost)})
    slots = 0.8 * 16 / 0.7
    ev = evaluation(120.0, current=4, required_slots=slots, utilization=0.8)
    d = ScalingPolicy().decide(ev, context(120.0, 4, last=short))
    assert (d.action, d.from_executors, d.to_executors) == ("scale_up", 4, 5)
    assert ScalingPolicy().decide(ev, context(120.0, 4)).action == "none"  # no cut-short change
    # Once a scale-up got what it needed, the band holds again (here a load that drifted to 6).
    after = replace(short, from_executors=4, to_executors=5)
    drifted = evaluation(130.0, current=5, required_slots=0.8 * 20 / 0.7, utilization=0.8)
    assert drifted.recommended_executors == 6
    assert ScalingPolicy().decide(drifted, context(130.0, 5, last=after)).action == "none"


def test_load_beyond_max_executors_scales_to_max_then_holds_and_says_so() -> None:
    cfg = AutoscalerConfig(max_executors=10)
    policy = ScalingPolicy()
    d = decide(policy, 0, 8, required_slots=100.0, cfg=cfg)
    assert (d.action, d.to_executors, d.limited_by) == ("scale_up", 10, "maxExecutors")
    assert "maxExecutors=10" in d.details
    held = decide(policy, 100, 10, required_slots=100.0, cfg=cfg)
    assert held.action == "none" and held.to_executors == 10
    assert held.limited_by == "maxExecutors"
    assert held.reason.startswith("hold 10 (maxExecutors)")
    assert "needs 25 executors but maxExecutors=10" in held.details


def test_parallelism_cap_is_named_as_the_limit() -> None:
    queries = {"q": qe(required=8.0, capped=True, cap=8)}
    ev = evaluation(0, current=1, required_slots=8.0, utilization=1.5, queries=queries)
    d = ScalingPolicy().decide(ev, context(0, 1))
    assert (d.action, d.to_executors, d.limited_by) == ("scale_up", 2, "parallelism")
    ev_hold = evaluation(0, current=2, required_slots=8.0, utilization=0.95, queries=queries)
    d_hold = ScalingPolicy().decide(ev_hold, context(0, 2))
    assert d_hold.action == "none" and d_hold.limited_by == "parallelism"
    assert "more executors would not help" in d_hold.reason


def test_scale_down_is_limited_by_the_max_factor() -> None:
    cfg = AutoscalerConfig(max_executors=20, scale_down_interval_s=0.0)
    d = decide(ScalingPolicy(), 0, 10, required_slots=6.0, cfg=cfg)  # needs 2; at most half
    assert (d.action, d.to_executors, d.limited_by) == ("scale_down", 5, "scaleDown.maxFactor")
    assert "scaleDown.maxFactor=0.5" in d.details


def test_scale_down_is_limited_by_min_executors() -> None:
    cfg = AutoscalerConfig(min_executors=3, max_executors=20, scale_down_interval_s=0.0)
    d = decide(ScalingPolicy(), 0, 5, required_slots=1.0, cfg=cfg)
    assert (d.action, d.to_executors, d.limited_by) == ("scale_down", 3, "minExecutors")
    assert "minExecutors=3" in d.details
    # Already at the minimum: nothing to do, and the reason names the limit.
    at_min = decide(ScalingPolicy(), 0, 3, required_slots=1.0, cfg=cfg)
    assert at_min.action == "none" and at_min.limited_by == "minExecutors"


def test_target_outside_min_max_is_brought_back() -> None:
    cfg = AutoscalerConfig(min_executors=2, max_executors=6)
    up = decide(ScalingPolicy(), 0, 1, required_slots=4.0, cfg=cfg)
    assert (up.action, up.to_executors, up.limited_by) == ("scale_up", 2, "minExecutors")
    down = decide(ScalingPolicy(), 0, 9, required_slots=30.0, cfg=cfg)
    assert (down.action, down.to_executors, down.limited_by) == ("scale_down", 6, "maxExecutors")


def test_backlog_mode_blocks_scale_down() -> None:
    cfg = AutoscalerConfig(max_executors=20, scale_down_interval_s=0.0)
    policy = ScalingPolicy()
    d = decide(policy, 0, 8, required_slots=4.0, cfg=cfg, backlog_mode=True)
    assert d.action == "none"
    assert "backlog mode" in d.reason and "no scale-down" in d.reason
    assert policy.pending_scale_down(8) is None
    # Without the backlog the same numbers scale down.
    assert decide(ScalingPolicy(), 0, 8, required_slots=4.0, cfg=cfg).action == "scale_down"


def test_backlog_mode_inside_the_band_does_not_scale_up() -> None:
    # The evaluator's utilization already counts the capacity the catch-up needs (Flink's
    # thresholds): inside the band the spare slots work the backlog off.
    d = decide(ScalingPolicy(), 0, 4, required_slots=0.8 * 16 / 0.7, backlog_mode=True)
    assert d.action == "none" and "no scale-up yet" in d.details


def test_an_evaluator_recommending_more_than_the_load_needs_drives_the_decision() -> None:
    # A custom evaluator's floor of 6 executors at a quiet load (utilization inside the band).
    ev = replace(evaluation(0, current=2, required_slots=4.0, utilization=0.6), recommended_executors=6,
                 reason="eval; business-hours floor of 6 executors")
    d = ScalingPolicy().decide(ev, context(0, 2))
    assert (d.action, d.to_executors) == ("scale_up", 6)
    assert "the evaluator's recommendation of 6" in d.details and "floor of 6" in d.reason
    # Still within the limits: maxExecutors and scaleUp.maxFactor.
    capped = ScalingPolicy().decide(replace(ev, recommended_executors=12),
                                    context(0, 2, AutoscalerConfig(max_executors=20,
                                                                   scale_up_max_factor=2.0)))
    assert (capped.to_executors, capped.limited_by) == (4, "scaleUp.maxFactor")


def test_delayed_scale_down_applies_the_largest_recommendation_seen() -> None:
    cfg = AutoscalerConfig(max_executors=20, scale_down_max_factor=0.9)
    policy = ScalingPolicy()
    # 12 executors; recommendations 3, 5, 4 executors over 300 s (utilization 0.18 .. 0.29).
    first = decide(policy, 0, 12, required_slots=3 * 4.0, cfg=cfg)
    assert first.action == "none"
    assert "scale-down to 3 pending for 0s of 300s" in first.details
    assert policy.pending_scale_down(12) == (0, 3)
    assert decide(policy, 100, 12, required_slots=5 * 4.0, cfg=cfg).action == "none"
    assert decide(policy, 200, 12, required_slots=4 * 4.0, cfg=cfg).action == "none"
    assert policy.pending_scale_down(12) == (0, 5)
    done = decide(policy, 300, 12, required_slots=3 * 4.0, cfg=cfg)
    assert (done.action, done.from_executors, done.to_executors) == ("scale_down", 12, 5)
    assert "after 5.0 min" in done.reason and "for 300s" in done.details


def test_delayed_scale_down_resets_on_scale_up_and_in_band() -> None:
    policy = ScalingPolicy()
    assert decide(policy, 0, 12, required_slots=20.0).action == "none"  # pending: 5
    assert decide(policy, 100, 12, required_slots=80.0).action == "scale_up"  # resets
    assert policy.pending_scale_down(12) is None
    assert decide(policy, 200, 12, required_slots=20.0).action == "none"  # pending again, from 200
    assert decide(policy, 450, 12, required_slots=20.0).action == "none"  # only 250 s
    assert decide(policy, 500, 12, required_slots=20.0).action == "scale_down"
    # A tick that needs the 12 executors breaks the run too.
    assert decide(policy, 600, 12, required_slots=20.0).action == "none"
    assert decide(policy, 700, 12, required_slots=48.0).action == "none"
    assert policy.pending_scale_down(12) is None
    assert decide(policy, 900, 12, required_slots=20.0).action == "none"
    assert policy.pending_scale_down(12) == (900, 5)


def test_not_ready_ticks_do_not_reset_a_pending_scale_down() -> None:
    policy = ScalingPolicy()
    decide(policy, 0, 12, required_slots=20.0)
    policy.decide(evaluation(150, current=12, required_slots=0, utilization=None, ready=False),
                  context(150, 12))
    assert policy.pending_scale_down(12) == (0, 5)


def test_a_scale_down_cut_short_by_the_max_factor_waits_once() -> None:
    # /4: the load needs 3 of 16 executors. The first step is cut to 8 (scaleDown.maxFactor 0.5)
    # after 300 s; the next step to where the load still points follows at once, not 300 s later.
    policy = ScalingPolicy()
    for now in range(0, 300, 30):
        assert decide(policy, now, 16, required_slots=12.0).action == "none"
    first = decide(policy, 300, 16, required_slots=12.0)
    assert (first.action, first.to_executors, first.limited_by) == ("scale_down", 8, "scaleDown.maxFactor")
    # Stabilizing at 8: no evaluation, nothing breaks the run.
    policy.decide(evaluation(330, current=8, required_slots=0, utilization=None, ready=False),
                  context(330, 8))
    second = decide(policy, 360, 8, required_slots=12.0)
    assert (second.action, second.from_executors, second.to_executors) == ("scale_down", 8, 4)
    assert (second.to_executors, second.limited_by) == (4, "scaleDown.maxFactor")


def test_no_scale_down_while_the_load_is_rising() -> None:
    cfg = AutoscalerConfig(max_executors=20, scale_down_interval_s=0.0)
    policy = ScalingPolicy()
    util = 4.0 * 0.7 / 32
    ev = replace(evaluation(0, current=8, required_slots=4.0, utilization=util, cfg=cfg), rising=True,
                 queries={"q": replace(qe(required=4.0), rising=True)})
    d = policy.decide(ev, context(0, 8, cfg))
    assert d.action == "none" and "the latest batches of 'q'" in d.details and "no scale-down" in d.reason
    assert policy.decide(replace(ev, rising=False), context(10, 8, cfg)).action == "scale_down"


@pytest.mark.parametrize(("forecast", "waits"), [
    (ForecastSizing(ahead=3, returning=3, applied=True, text="f", every_query=True), False),
    # The forecast sees the load come back above the smaller size within the interval.
    (ForecastSizing(ahead=3, returning=6, applied=True, text="f", every_query=True), True),
    # In shadow it only says what it would do.
    (ForecastSizing(ahead=3, returning=3, applied=False, text="f", every_query=False), True),
    # Another query has no applied forecast: its dip may be brief.
    (ForecastSizing(ahead=3, returning=3, applied=True, text="f", every_query=False), True),
    (None, True),
])
def test_a_scale_down_the_applied_forecast_confirms_does_not_wait_scale_down_interval(
        forecast: ForecastSizing | None, waits: bool) -> None:
    policy = ScalingPolicy()
    ev = evaluation(0, current=12, required_slots=12.0, utilization=12.0 * 0.7 / 48)
    first = policy.decide(replace(ev, forecast=forecast), context(0, 12))
    if waits:
        assert first.action == "none" and "scale-down to 3 in 5.0 min" in first.reason, first.reason
        return
    assert (first.action, first.from_executors, first.to_executors) == ("scale_down", 12, 6)
    assert first.reason.startswith("scale down 12 -> 6, the forecast sees the load stay low"), first.reason
    assert "no more within scaleDownInterval=300s by the applied forecast" in first.details


def _record(frm: int = 2, to: int = 4, queries: tuple[str, ...] = ("q",)) -> ScalingRecord:
    """A scale-up from ``frm`` to ``to`` that each of ``queries`` needed, on a model without error:
    batches of 20,000 rows expected to go from 10 s to 5 s."""
    cost = BatchCost(0.0, 0.0, 0.0, 0.001, 8, 8, 2, 1.0, 0.0, 20, True)
    return ScalingRecord(time=1000.0, action="scale_up", from_executors=frm, to_executors=to,
                         reason="test", rate_before={"q": 1000.0},
                         predictions={q: Prediction(q, 3000.0, 20000.0, to, 10.0, 5.0, 4000.0, None, cost)
                                      for q in queries})


def _outcome(qid: str = "q", effective: bool = False) -> Outcome:
    """The new executors' batches measured: 9.8 s of the 10 s before (ineffective: 4 % of the gain
    expected), or 5.2 s (effective)."""
    return Outcome(query_id=qid, batches=3, rows_per_batch=20000, batch_time_s=5.2 if effective else 9.8,
                   predicted_s=5.0, predicted_before_s=10.0, executors=4)


def test_an_ineffective_outcome_blocks_then_a_load_change_unblocks() -> None:
    policy = ScalingPolicy()
    record = _record()
    queries = {"q": qe(input_rate=1050.0, target_rate=3000.0, required=40.0)}
    ev = evaluation(1200, current=4, required_slots=40.0, utilization=1.6, queries=queries)
    # No outcome measured yet: no judgement.
    d0 = policy.decide(ev, context(1200, 4, window_start=1035, last=record))
    assert policy.blocked_queries() == {} and d0.action == "scale_up"
    # The outcome: the new executors' batches took what the old size would have.
    judged = replace(ev, outcomes={"q": _outcome()})
    d = policy.decide(judged, context(1300, 4, window_start=1035, last=record))
    assert "q" in policy.blocked_queries()
    assert d.action == "none" and d.limited_by == "ineffectiveScaleUp"
    assert "blocked" in d.reason and "took 9.80s on 4 executors" in d.details
    assert [s for s, n in policy.last_notes() if n.startswith("blocked scale-up for query 'q'")] == \
        ["scale-up-blocked:q"]
    # Judged once: still blocked while its load stays put, the notes not repeated.
    d2 = policy.decide(judged, context(1400, 4, window_start=1035, last=record))
    assert d2.action == "none" and "q" in policy.blocked_queries()
    assert policy.last_notes() == []
    # The target rate moves by more than 50 %: unblocked, the scale-up goes ahead.
    moved = {"q": qe(input_rate=1050.0, target_rate=5000.0, required=60.0)}
    ev3 = evaluation(1500, current=4, required_slots=60.0, utilization=2.4, queries=moved)
    d3 = policy.decide(ev3, context(1500, 4, window_start=1035, last=record))
    assert policy.blocked_queries() == {}
    assert d3.action == "scale_up"
    assert [s for s, n in policy.last_notes() if n.startswith("unblocked")] == ["scale-up-unblocked:q"]


def test_an_effective_outcome_does_not_block() -> None:
    policy = ScalingPolicy()
    queries = {"q": qe(input_rate=1900.0, target_rate=3000.0, required=40.0)}
    ev = replace(evaluation(1300, current=4, required_slots=40.0, utilization=1.6, queries=queries),
                 outcomes={"q": _outcome(effective=True)})
    d = policy.decide(ev, context(1300, 4, window_start=1035, last=_record()))
    assert policy.blocked_queries() == {} and d.action == "scale_up"


def test_a_blocked_query_does_not_stop_another_from_scaling_up() -> None:
    policy = ScalingPolicy()
    queries = {"a": qe("a", input_rate=1000.0, target_rate=3000.0, required=32.0),
               "b": qe("b", input_rate=500.0, required=24.0)}
    ev = replace(evaluation(1300, current=4, required_slots=32.0, utilization=1.4, queries=queries),
                 outcomes={"a": _outcome("a")})
    d = policy.decide(ev, context(1300, 4, window_start=1035, last=_record(queries=("a",))))
    assert "a" in policy.blocked_queries()
    # a keeps the current 4 executors but asks for no more; b needs 6.
    assert (d.action, d.to_executors) == ("scale_up", 6)
    assert "scale-up blocked (ineffective scale-up) for 'a'" in d.details


def test_reactive_mode_takes_max_and_re_requests_losses() -> None:
    cfg = AutoscalerConfig(mode="reactive", max_executors=8)
    policy = ScalingPolicy()
    idle = evaluation(0, current=2, required_slots=0.5, utilization=0.02, cfg=cfg)
    d = policy.decide(idle, context(0, 2, cfg))
    assert (d.action, d.to_executors, d.limited_by) == ("scale_up", 8, "maxExecutors")
    hold = policy.decide(idle, context(10, 8, cfg))
    assert hold.action == "none" and "never scaling down" in hold.reason
    lost = policy.decide(idle, context(20, 8, cfg, live=5, pending=1))
    assert (lost.action, lost.from_executors, lost.to_executors) == ("scale_up", 6, 8)
    assert "2 executors lost" in lost.reason
    not_ready = evaluation(30, current=8, required_slots=0, utilization=None, cfg=cfg, ready=False)
    assert policy.decide(not_ready, context(30, 8, cfg)).action == "none"


def _epoch(hour: int, minute: int) -> float:
    return time.mktime((2024, 6, 12, hour, minute, 0, 0, 0, -1))  # local time


@pytest.mark.parametrize(("hour", "minute", "expected"), [
    (12, 10, True), (12, 29, True), (12, 30, False), (11, 59, False),  # 12:00-12:30
    (22, 0, True), (23, 59, True), (0, 0, True), (5, 59, True), (6, 0, False),  # 22:00-06:00 wraps
    (21, 59, False), (15, 0, False),
])
def test_excluded_periods_including_wrapping_midnight(hour: int, minute: int, expected: bool) -> None:
    cfg = AutoscalerConfig(excluded_periods=((12 * 60, 12 * 60 + 30), (22 * 60, 6 * 60)))
    assert in_excluded_period(cfg, _epoch(hour, minute)) is expected


def test_no_excluded_periods_and_whole_day_window() -> None:
    assert not in_excluded_period(AutoscalerConfig(), _epoch(3, 0))
    assert in_excluded_period(AutoscalerConfig(excluded_periods=((300, 300),)), _epoch(17, 45))


def test_next_window_start() -> None:
    cfg = AutoscalerConfig(stabilization_interval_s=30.0, provisioning_timeout_s=120.0)
    assert next_window_start(cfg, 100.0, None, 150.0) == math.inf  # still waiting
    assert next_window_start(cfg, 100.0, 106.0, 150.0) == 136.0  # registered + 30 s
    assert next_window_start(cfg, 100.0, None, 220.0) == 250.0  # gave up at the timeout


def test_scaling_record_carries_what_the_model_predicts() -> None:
    cost = BatchCost(driver_s=0.5, fixed_task_s=1.6, per_executor_s=0.0, per_row_s=0.002, tasks=32,
                     widest=32, cores=4, efficiency=1.0, error=0.05, batches=20, row_cost_trusted=True)
    queries = {
        "slow": replace(qe("slow", input_rate=1000.0, target_rate=3000.0, catch_up=500.0, backlog=60000.0),
                        cost=cost, trigger_s=10.0, rows_per_batch=35000.0, required_executors=5),
        "unknown": qe("unknown", input_rate=200.0, target_rate=200.0),
    }
    ev = evaluation(50, current=2, required_slots=40.0, utilization=2.0, queries=queries)
    d = Decision(time=50.0, action="scale_up", from_executors=2, to_executors=5, reason="r", evaluation=ev)
    rec = scaling_record(d)
    assert (rec.time, rec.from_executors, rec.to_executors) == (50.0, 2, 5)
    assert rec.rate_before == {"slow": 1000.0, "unknown": 200.0}
    assert set(rec.predictions) == {"slow"}  # no model, no prediction
    p = rec.predictions["slow"]
    assert p.rate == 3500.0 and p.rows_per_batch == 35000.0 and p.needed_executors == 5
    # 35000 rows: 71.6 s of task time over 32 tasks; 8 slots run 4 waves, 20 slots 2.
    assert p.batch_time_before_s == pytest.approx(0.5 + 4 * 71.6 / 32)
    assert p.batch_time_s == pytest.approx(0.5 + 2 * 71.6 / 32)
    assert p.throughput == pytest.approx(1 / (2 * 0.002 / 32))
    assert p.drain_s == pytest.approx(60000.0 / (p.throughput - 3000.0))
    summary = p.summary()
    assert summary["batchTimeS"] == pytest.approx(p.batch_time_s, rel=1e-3) and summary["modelError"] == 0.05
