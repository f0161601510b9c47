"""The cluster backend in Spark: the SparkContext's executor API, reached through the JVM bridge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..realize.realizer import ClusterBackend


class SparkClusterBackend(ClusterBackend):
    """The SparkContext's executor API, reached through the JVM bridge."""

    def __init__(self, bridge: Any) -> None:
        self._bridge = bridge

    def executor_ids(self) -> list[str]:
        return list(self._bridge.executor_ids())

    def running_tasks(self) -> dict[str, int]:
        return {eid: e.running_tasks for eid, e in self._bridge.poll().executors.items() if e.live}

    def request_total(self, total: int) -> bool:
        return bool(self._bridge.request_total_executors(total))

    def kill(self, executor_ids: Sequence[str], force: bool = False) -> list[str]:
        if force:
            return list(self._bridge.kill_executors(list(executor_ids)))
        return list(self._bridge.kill_idle_executors(list(executor_ids)))

    def remove_when_idle(self, executor_ids: Sequence[str], target: int) -> None:
        self._bridge.remove_when_idle(list(executor_ids), target)

    def removed_when_idle(self) -> list[str]:
        return self._bridge.removed_when_idle()

    def decommission(self, executor_ids: Sequence[str]) -> list[str]:
        return list(self._bridge.decommission_executors(list(executor_ids)))

    def pinned(self) -> set[str]:
        return self._bridge.shuffle_holders()
