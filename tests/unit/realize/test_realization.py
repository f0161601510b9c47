"""The built-in realizer on the simulated cluster: absolute targets, idle-only removal, and
suspects first."""

from __future__ import annotations

from collections.abc import Sequence

from sparkscale_listener.realize.realizer import ExecutorRealizer
from sparkscale_listener.sim import SimCluster


def cluster(executors: int) -> SimCluster:
    return SimCluster(cores_per_executor=1, provisioning_delay_s=0.0, initial_executors=executors)


def test_scale_down_removes_only_idle_executors_and_pins_the_target() -> None:
    c = cluster(3)
    realizer = ExecutorRealizer(c, min_executors=1)
    realizer.baseline(3)
    c.set_running(1)  # the oldest executor runs a task
    busy = [e for e, n in c.running_tasks().items() if n]
    result = realizer.realize(1)
    assert len(result.removed) == 2 and not set(result.removed) & set(busy)
    assert realizer.requested_total == 1


def test_busy_executors_wait_for_a_later_call() -> None:
    c = cluster(3)
    realizer = ExecutorRealizer(c, min_executors=1)
    realizer.baseline(3)
    c.set_running(3)  # every executor busy
    first = realizer.realize(1)
    assert first.removed == () and "busy" in first.message
    assert realizer.requested_total == 1  # no executor is re-requested meanwhile
    c.set_running(0)
    second = realizer.realize(1)
    assert len(second.removed) == 2


def test_busy_executors_named_for_removal_go_as_their_tasks_end_between_calls() -> None:
    # As the bridge does in the driver: a control loop whose ticks always find the executors busy
    # (its interval in step with the trigger) still gets its scale-down.
    c = SimCluster(cores_per_executor=1, provisioning_delay_s=0.0, initial_executors=3, kill_delay_s=5.0)
    realizer = ExecutorRealizer(c, min_executors=1)
    realizer.baseline(3)
    c.set_running(3)
    assert realizer.realize(1).removed == ()
    c.set_running(1)  # between two calls, two executors' tasks end (the newest two: tasks fill oldest first)
    assert c.live_count == 1 and c.target == 1 and len(c.executor_ids()) == 3  # listed until removed
    c.set_running(3)  # busy again when the loop next looks
    again = realizer.realize(1)
    assert len(again.removed) == 2 and realizer.requested_total == 1
    c.advance(c.now + 5.0)
    assert len(c.executor_ids()) == 1


def test_suspects_are_removed_first_even_when_busy() -> None:
    c = cluster(3)
    realizer = ExecutorRealizer(c, min_executors=1)
    realizer.baseline(3)
    c.set_running(3)
    newest = sorted(c.executor_ids(), key=int)[-1]
    result = realizer.realize(2, remove_first={newest})
    assert result.removed == (newest,)


def test_never_below_min_executors() -> None:
    c = cluster(3)
    realizer = ExecutorRealizer(c, min_executors=2)
    realizer.baseline(3)
    result = realizer.realize(0)
    assert len(result.removed) == 1 and realizer.requested_total == 2


class ShuffleHoldingCluster(SimCluster):
    """The simulated cluster, with some idle executors holding a running batch's shuffle output."""

    def __init__(self, executors: int) -> None:
        super().__init__(cores_per_executor=1, provisioning_delay_s=0.0, initial_executors=executors)
        self.holders: set[str] = set()

    def pinned(self) -> set[str]:
        return set(self.holders)


def test_idle_executors_holding_a_running_batchs_shuffle_output_wait_for_the_batch_to_end() -> None:
    c = ShuffleHoldingCluster(3)
    realizer = ExecutorRealizer(c, min_executors=1)
    realizer.baseline(3)
    newest = sorted(c.executor_ids(), key=int)
    c.holders = set(newest[1:])  # the newest would go first, but their map output is still to be read
    first = realizer.realize(1)
    assert first.removed == (newest[0],) and "shuffle output" in first.message
    assert realizer.requested_total == 1
    c.holders = set()  # the batch ended
    second = realizer.realize(1)
    assert second.removed == (newest[-1],)


class RemovingWhenIdleCluster(SimCluster):
    """The simulated cluster with the bridge's removal at the end of an executor's tasks: what is
    wanted is recorded, and the test says which of them the bridge removed."""

    def __init__(self, executors: int) -> None:
        super().__init__(cores_per_executor=1, provisioning_delay_s=0.0, initial_executors=executors)
        self.wanted: list[str] = []
        self.keep: int | None = None
        self.done: list[str] = []

    def remove_when_idle(self, executor_ids: Sequence[str], target: int) -> None:
        self.wanted, self.keep = list(executor_ids), target

    def removed_when_idle(self) -> list[str]:
        done, self.done = self.done, []
        return done


def test_busy_executors_are_named_for_removal_when_their_tasks_end_and_never_one_too_many() -> None:
    c = RemovingWhenIdleCluster(3)
    realizer = ExecutorRealizer(c, min_executors=1)
    realizer.baseline(3)
    ids = sorted(c.executor_ids(), key=int)
    c.set_running(3)  # every executor runs a batch's tasks when the tick looks
    first = realizer.realize(1)
    assert first.removed == () and "when their tasks end" in first.message
    assert c.wanted == [ids[2], ids[1]] and c.keep == 1  # newest first
    assert realizer.requested_total == 1  # the target is set once, not lowered per removal
    # The newest ran out of tasks and the bridge removed it; Spark still lists it for a while.
    c.done = [ids[2]]
    second = realizer.realize(1)
    assert second.removed == (ids[2],)
    assert c.wanted == [ids[1]]  # not a third executor in its place
    # A scale-up before the other one's tasks ended: nothing is removed any more.
    realizer.realize(3)
    assert c.wanted == []


def test_an_executor_removed_when_idle_is_not_counted_as_live() -> None:
    c = RemovingWhenIdleCluster(2)
    realizer = ExecutorRealizer(c, min_executors=1)
    realizer.baseline(2)
    ids = sorted(c.executor_ids(), key=int)
    c.set_running(2)
    realizer.realize(1)
    c.done = [ids[1]]
    result = realizer.realize(1)  # the one left is the target: nothing more to remove
    assert result.removed == (ids[1],) and c.wanted == [] and realizer.requested_total == 1


class RequestsFailingCluster(RemovingWhenIdleCluster):
    """The simulated cluster whose target requests raise (the cluster manager unreachable) once
    ``failing`` is set, after the removals before them went through."""

    failing = False

    def request_total(self, total: int) -> bool:
        if self.failing:
            raise RuntimeError("org.apache.spark.SparkException: Exception thrown in awaitResult\n"
                               "  at org.apache.spark.util.SparkThreadUtils$.awaitResult")
        return super().request_total(total)


def test_a_request_that_raises_after_a_decommission_still_names_it_and_names_no_busy_one() -> None:
    c = RequestsFailingCluster(4)
    realizer = ExecutorRealizer(c, min_executors=1, decommission=True)
    realizer.baseline(4)
    ids = sorted(c.executor_ids(), key=int)
    c.set_running(2)  # the two oldest run tasks
    c.failing = True
    result = realizer.realize(1)
    # The failure is returned, not raised, with the two idle executors it decommissioned: only the
    # decommissions a result names are the autoscaler's own (any other during a scale-up's wait is
    # a drained node's, whose replacement is waited for).
    assert result.removed == (ids[3], ids[2]) and not set(result.removed) & set(c.executor_ids())
    assert not result.ok and result.message == "RuntimeError: org.apache.spark.SparkException: " \
        "Exception thrown in awaitResult at org.apache.spark.util.SparkThreadUtils$.awaitResult"
    assert realizer.requested_total == 4  # the last target the cluster manager accepted
    # And no busy executor named for removal at the end of its tasks while requests fail: Spark
    # marks one pending removal before asking the cluster manager, and a failed ask leaves it idle.
    assert c.wanted == []
