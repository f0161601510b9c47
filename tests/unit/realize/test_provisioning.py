"""Provisioning time: learned pessimistically (a high percentile, timeouts included), from when the
executors registered, and kept across a driver restart."""

from __future__ import annotations

from harness import cfg
from sparkscale_listener.decisions import ScalingRecord
from sparkscale_listener.metrics import ExecutorInfo
from sparkscale_listener.realize.provisioning import AllocationBatches, ProvisioningTracker
from sparkscale_listener.spark.session import allocation_batches
from sparkscale_listener.state.autoscaler_state import AutoscalerState
from sparkscale_listener.state.store import InMemoryStateStore

KILLED = "Command exited with code 137"  # a removal from outside


def tracker(store: InMemoryStateStore | None = None, batches: AllocationBatches | None = None,
            **keys: str) -> ProvisioningTracker:
    def fail(where: str, exc: BaseException) -> None:
        raise AssertionError(f"{where}: {exc}")

    state = AutoscalerState(store or InMemoryStateStore(), "app", fail)
    return ProvisioningTracker(cfg(**keys), state, batches)


def scale_up(t: ProvisioningTracker, now: float, to: int) -> None:
    t.start(ScalingRecord(now, "scale_up", 1, to, "test"), to, now)


def test_the_configured_time_is_used_until_one_is_measured() -> None:
    assert tracker(provisioningTime="45s").time_s() == 45.0
    assert tracker(provisioningTime="300s", provisioningTimeout="120s").time_s() == 120.0


def test_a_high_percentile_not_the_median() -> None:
    t = tracker()
    t.observations = [5.0] * 8 + [30.0, 40.0]
    assert t.time_s() == 30.0  # the median would say 5 s: every slow start would fall behind
    t.observations = [5.0] * 9 + [40.0]
    assert t.time_s() == 5.0  # one outlier in ten is not the 90th percentile


def test_the_time_is_when_the_last_executor_registered_not_the_tick_that_saw_it() -> None:
    t = tracker()
    scale_up(t, 100.0, 3)
    executors = [ExecutorInfo("1", added_time=10.0), ExecutorInfo("2", added_time=107.5),
                 ExecutorInfo("3", added_time=112.25)]
    assert t.settle(120.0, live=3, target=3, executors=executors) is not None
    assert t.observations == [12.25]


def test_executors_beyond_the_target_settle_nothing_until_they_are_gone() -> None:
    # A standalone master starts an executor on every free core before the first request reaches
    # it: 1 asked for, 6 came; batches run on executors leaving until the extras are removed.
    t = tracker(stabilizationInterval="3s")
    t.start(ScalingRecord(0.0, "scale_up", 0, 1, "baseline"), 1, 0.0)
    executors = [ExecutorInfo(str(i), added_time=8.0 + i) for i in range(6)]
    assert t.settle(14.0, live=6, target=1, executors=executors) is None
    assert t.settle(16.0, live=3, target=1, executors=executors[:3]) is None
    settled = t.settle(18.0, live=1, target=1, executors=executors[:1])
    assert settled is not None and settled.window_start == 21.0 and settled.shortfall is None
    assert t.observations == [8.0]  # when the one asked for registered


def test_a_timeout_is_recorded_as_the_time_waited_and_survives_a_restart() -> None:
    store = InMemoryStateStore()
    t = tracker(store, provisioningTimeout="60s")
    scale_up(t, 0.0, 4)
    assert t.settle(30.0, live=2, target=4) is None  # still waiting
    assert t.settle(60.0, live=2, target=4) is not None  # gave up
    assert t.observations == [60.0] and t.time_s() == 60.0
    t.state.flush()  # the end of the tick
    restarted = tracker(store, provisioningTimeout="60s")
    restarted.restore()
    assert restarted.time_s() == 60.0


def test_a_scale_down_is_not_a_provisioning_observation() -> None:
    t = tracker()
    t.start(ScalingRecord(0.0, "scale_down", 4, 2, "test"), 2, 0.0)
    assert t.settle(10.0, live=2, target=2) is not None
    assert t.observations == []


def test_an_executor_lost_from_outside_starts_the_wait_again() -> None:
    # 2 -> 4, both new ones came, but an original died meanwhile: its replacement gets a
    # provisioning time of its own, and once it came nothing fell short.
    t = tracker(provisioningTimeout="60s")
    scale_up(t, 0.0, 4)
    lost = ExecutorInfo("1", added_time=-100.0, removed_time=30.0, removed_reason=KILLED)
    alive = [ExecutorInfo(str(i), added_time=a) for i, a in ((2, -100.0), (3, 20.0), (4, 25.0))]
    assert t.settle(60.0, live=3, target=4, executors=[lost, *alive]) is None  # 30 s since the loss
    replaced = [*alive, ExecutorInfo("5", added_time=85.0)]
    settled = t.settle(86.0, live=4, target=4, executors=[lost, *replaced])
    assert settled is not None and settled.shortfall is None
    assert t.observations == [25.0]  # when the last one asked for came, not the replacement


def test_a_loss_replaced_within_the_wait_does_not_hide_the_clusters_limit() -> None:
    # Room for 3: 2 -> 4 got executor 3; executor 1 died and its replacement took its room.
    t = tracker(provisioningTimeout="60s")
    scale_up(t, 0.0, 4)
    lost = ExecutorInfo("1", added_time=-100.0, removed_time=30.0, removed_reason=KILLED)
    alive = [ExecutorInfo(str(i), added_time=a) for i, a in ((2, -100.0), (3, 20.0), (5, 45.0))]
    assert t.settle(60.0, live=3, target=4, executors=[lost, *alive]) is None
    settled = t.settle(90.0, live=3, target=4, executors=[lost, *alive])
    assert settled is not None and settled.shortfall is not None
    assert (settled.shortfall.requested, settled.shortfall.live) == (4, 3)


def test_our_own_removals_and_unexplained_ones_do_not_extend_the_wait() -> None:
    # Killed by the driver (a converge step), or removed without a reason (it cannot be told from
    # one of ours): the cluster gave 3 of 4 at the timeout.
    for reason in ("Executor killed by driver.", None):
        t = tracker(provisioningTimeout="60s")
        scale_up(t, 0.0, 4)
        gone = ExecutorInfo("1", added_time=-100.0, removed_time=30.0, removed_reason=reason)
        alive = [ExecutorInfo(str(i), added_time=a) for i, a in ((2, -100.0), (3, 20.0), (4, 25.0))]
        settled = t.settle(60.0, live=3, target=4, executors=[gone, *alive])
        assert settled is not None and settled.shortfall is not None, reason
        assert (settled.shortfall.requested, settled.shortfall.live) == (4, 3)


def test_a_decommission_is_the_clusters_unless_the_autoscaler_removed_that_executor() -> None:
    # A node drained by the cluster decommissions its executor: lost like any other, its
    # replacement on its way, also where the autoscaler decommissions executors itself
    # (scaleDown.decommission); one the autoscaler removed (a converge step) is not.
    def executors(reason: str) -> list[ExecutorInfo]:
        return [ExecutorInfo("1", added_time=-100.0, removed_time=30.0, removed_reason=reason),
                *(ExecutorInfo(str(i), added_time=a) for i, a in ((2, -100.0), (3, 20.0), (4, 25.0)))]

    for keys in ({}, {"scaleDown.decommission": "true"}):
        drained = tracker(provisioningTimeout="60s", **keys)
        scale_up(drained, 0.0, 4)
        drain = executors("Executor decommission: worker decommissioned")
        assert drained.settle(60.0, live=3, target=4, executors=drain) is None, keys
        ours = tracker(provisioningTimeout="60s", **keys)
        scale_up(ours, 0.0, 4)
        ours.removed_by_us(["1"])
        removal = executors("Executor decommission: scale down")
        settled = ours.settle(60.0, live=3, target=4, executors=removal)
        assert settled is not None and settled.shortfall is not None, keys


def test_a_loss_before_the_request_does_not_extend_the_wait() -> None:
    t = tracker(provisioningTimeout="60s")
    scale_up(t, 100.0, 4)
    earlier = ExecutorInfo("1", added_time=0.0, removed_time=90.0, removed_reason=KILLED)
    alive = [ExecutorInfo(str(i), added_time=a) for i, a in ((2, 0.0), (3, 120.0), (4, 125.0))]
    settled = t.settle(160.0, live=3, target=4, executors=[earlier, *alive])
    assert settled is not None and settled.shortfall is not None


def test_kubernetes_pod_batches_are_expected_waited_for_and_taken_off_what_is_learned() -> None:
    # 7 pods in batches of 2, 1 s apart: the last batch starts 3 s after the first.
    t = tracker(batches=AllocationBatches(2, 1.0), provisioningTime="5s", provisioningTimeout="60s")
    t.start(ScalingRecord(0.0, "scale_up", 1, 8, "test"), 8, 0.0)
    assert t.pending is not None and t.expected_s(t.pending) == 8.0
    waiting = t.waiting_for(2.0, live=1)
    assert waiting is not None and "7 of 8 requested executors" in waiting
    assert "expected within 8 s" in waiting
    assert "2 at a time, 1 s apart" in waiting and "after 63 s" in waiting
    assert t.settle(61.0, live=5, target=8) is None  # the batches' 3 s are part of the wait
    executors = [ExecutorInfo(str(i), added_time=9.0 + i) for i in range(7)]
    assert t.settle(63.0, live=8, target=8, executors=executors) is not None
    assert t.observations == [12.0]  # 15 s for the last one, less the 3 s of the later batches
    assert t.waiting_for(64.0, live=8) is None


def test_a_scale_up_within_one_batch_waits_no_longer_and_other_managers_have_no_batches() -> None:
    t = tracker(batches=AllocationBatches(10, 1.0), provisioningTime="5s")
    scale_up(t, 0.0, 4)
    assert t.pending is not None and t.pending.batch_wait_s == 0.0 and t.expected_s(t.pending) == 5.0
    assert "at a time" not in (t.waiting_for(1.0, live=1) or "")
    assert allocation_batches({"spark.master": "yarn"}, "4.3.0") is None
    k8s = {"spark.master": "k8s://https://10.0.0.1:443"}
    assert allocation_batches(k8s, "4.3.0") == AllocationBatches(20, 1.0)
    assert allocation_batches(k8s, "4.0.1") == AllocationBatches(10, 1.0)
    assert allocation_batches(k8s, "3.5.7") == AllocationBatches(5, 1.0)
    small = {**k8s, "spark.kubernetes.allocation.batch.size": "3",
             "spark.kubernetes.allocation.batch.delay": "500"}
    assert allocation_batches(small, "4.3.0") == AllocationBatches(3, 0.5)
    assert allocation_batches({**k8s, "spark.kubernetes.allocation.batch.delay": "2s"}, "4.3.0") == \
        AllocationBatches(20, 2.0)
