"""The built-in realizer on the simulated cluster: absolute targets, idle-only removal, and
suspects first."""

from __future__ import annotations

from sparkscale_listener.realize.realizer import ExecutorRealizer
from sparkscale_listener.testing.sim import SimCluster


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
