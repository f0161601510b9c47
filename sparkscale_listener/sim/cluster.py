"""The simulated cluster manager and its executors (:class:`SimCluster`).

A :class:`ClusterBackend` with a provisioning delay and Spark's target semantics (lowering the
target kills nothing; a kill lowers the target by one per executor; the first kill without any
request sets the target to 0). A lower target cancels launches still pending, or, with
``launch_commit_s``, only those requested less than that long ago (a YARN container once
allocated starts whatever the target does). Executors named by :meth:`SimCluster.remove_when_idle`
go the moment they run no task, as the bridge removes them in the driver: without it, a control
loop whose ticks fall in step with the trigger found them busy at every tick, and a replayed
scale-down waited 36-46 s where the recorded one took 5-6 s. It knows nothing of queries: the
simulation places their tasks on it (:meth:`SimCluster.place_tasks`, :meth:`SimCluster.set_running`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..metrics import ExecutorInfo
from ..realize.realizer import ClusterBackend
from .tolerance import EPS

KILLED_BY_DRIVER = "Executor killed by driver."  # Spark's removal reason for killExecutors
DECOMMISSIONED = "Executor decommission: scale down"  # ... and for decommissionExecutors


@dataclass
class _Executor:
    executor_id: str
    added_time: float
    requested_time: float
    running_tasks: int = 0
    removed_time: float | None = None
    removed_reason: str | None = None
    bad: bool = False  # every task placed on it fails
    speed: float = 1.0  # how fast it runs tasks, relative to a healthy executor
    failed: float = 0.0  # failed task attempts (fractional: the fluid model)


class SimCluster(ClusterBackend):
    """Executors of a simulated cluster manager (standalone-like semantics, see module docstring).

    Fault injection: launches requested at or after ``bad_executors_from`` yield executors on
    which every task fails; launches requested at or after ``start_failure_from`` never register
    (``start_failure_reason`` None) or register and die at once with that reason. The executors
    present at construction are never affected.
    """

    def __init__(self, cores_per_executor: int, provisioning_delay_s: float, initial_executors: int,
                 now: float = 0.0, kill_delay_s: float = 0.0, *,
                 bad_executors_from: float | None = None, start_failure_from: float | None = None,
                 start_failure_reason: str | None = None,
                 heap_used_ratio: float | None = None, launch_commit_s: float | None = None,
                 slow_executors_from: float | None = None, slow_speed: float = 1.0) -> None:
        self.cores_per_executor = cores_per_executor
        self.slow_executors_from = slow_executors_from
        self.slow_speed = slow_speed
        self.launch_commit_s = launch_commit_s
        self.provisioning_delay_s = provisioning_delay_s
        self.kill_delay_s = kill_delay_s
        self.bad_executors_from = bad_executors_from
        self.start_failure_from = start_failure_from
        self.start_failure_reason = start_failure_reason
        self.heap_used_ratio = heap_used_ratio
        self.now = now
        self.target: int | None = None  # the cluster manager's target; None: nothing requested
        self._initial = initial_executors
        self._next_id = 0
        self._live: dict[str, _Executor] = {}
        self._removing: dict[str, float] = {}  # killed, gone at this time
        self._removal_reason: dict[str, str] = {}
        self._removed: list[_Executor] = []
        self._pending: list[float] = []  # request time of each launch under way
        self.provisioning_observed: list[float] = []  # request -> registered, seconds
        self.executors_added = 0
        self.executors_removed = 0
        self._failed_removed = 0.0  # failed task attempts on executors that are gone
        self._order: list[_Executor] | None = None
        # Named by remove_when_idle: removed the moment they run no task, while more than the
        # target given with them are live (as the bridge does in the driver).
        self._when_idle: list[str] = []
        self._when_idle_target = 0
        self._removed_idle: list[str] = []
        for _ in range(initial_executors):
            self._register(now, now, initial=True)

    # -- ClusterBackend ---------------------------------------------------------------------------

    def executor_ids(self) -> list[str]:
        return list(self._live)

    def running_tasks(self) -> dict[str, int]:
        return {eid: e.running_tasks for eid, e in self._live.items()}

    def request_total(self, total: int) -> bool:
        self.target = max(0, int(total))
        self._reconcile()
        return True

    def kill(self, executor_ids: Sequence[str], force: bool = False) -> list[str]:
        # Like Spark's killExecutors(force=false): the scheduler skips an executor running tasks.
        ids = [e for e in executor_ids
               if force or (e in self._live and self._live[e].running_tasks == 0)]
        return self._kill(ids, KILLED_BY_DRIVER)

    def decommission(self, executor_ids: Sequence[str]) -> list[str]:
        return self._kill(executor_ids, DECOMMISSIONED)

    def remove_when_idle(self, executor_ids: Sequence[str], target: int) -> None:
        self._when_idle = [e for e in executor_ids if e in self._live]
        self._when_idle_target = target

    def removed_when_idle(self) -> list[str]:
        removed, self._removed_idle = self._removed_idle, []
        return removed

    def _kill(self, executor_ids: Sequence[str], reason: str) -> list[str]:
        killed = [eid for eid in executor_ids if eid in self._live and eid not in self._removing]
        self._order = None
        for eid in killed:
            self._removing[eid] = self.now + self.kill_delay_s
            self._removal_reason[eid] = reason
            self._live[eid].running_tasks = 0  # its tasks are lost and re-run elsewhere
        # Spark lowers the target by one per killed executor; with no target ever requested the
        # first kill leaves the limit at 0 (the empty-target trap).
        self.target = 0 if self.target is None else max(0, self.target - len(killed))
        self._reconcile()
        self.advance(self.now)
        return killed

    # -- simulation -------------------------------------------------------------------------------

    @property
    def live_count(self) -> int:
        """Executors that run tasks (killed ones stop at once, even while still listed)."""
        return len(self._live) - len(self._removing)

    @property
    def listed_count(self) -> int:
        """Executors Spark's listener still lists: a killed one until its removal is announced."""
        return len(self._live)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def slots(self) -> int:
        return self.live_count * self.cores_per_executor

    @property
    def effective_target(self) -> int:
        """The target the cluster manager works towards (its initial count before any request)."""
        return self._initial if self.target is None else self.target

    @property
    def tasks_failed(self) -> int:
        return int(self._failed_removed + sum(e.failed for e in self._live.values()) + EPS)

    def advance(self, now: float) -> None:
        """Register launches whose delay has passed and drop killed executors that are gone."""
        self.now = now
        ready = [r for r in self._pending if r + self.provisioning_delay_s <= now + EPS
                 and not (self._start_fails(r) and self.start_failure_reason is None)]
        for r in ready:
            self._pending.remove(r)
            at = r + self.provisioning_delay_s
            eid = self._register(at, r)
            if self._start_fails(r):  # registers, then dies at once
                self._remove(eid, at, str(self.start_failure_reason))
                self._reconcile()  # the cluster manager launches a replacement
        for eid, gone in list(self._removing.items()):
            if gone <= now + EPS:
                del self._removing[eid]
                self._remove(eid, gone, self._removal_reason.pop(eid, KILLED_BY_DRIVER))

    def lose(self, executor_id: str, reason: str = "lost") -> None:
        """An executor dies (not asked for): the cluster manager replaces it up to its target."""
        self._removing.pop(executor_id, None)
        self._removal_reason.pop(executor_id, None)
        self._remove(executor_id, self.now, reason)
        self._reconcile()

    def place_tasks(self, tasks: float) -> dict[str, int]:
        """Where ``ceil(tasks)`` tasks run: the live executors filled oldest first (the newest stay
        idle). Returns the tasks per executor id."""
        left = math.ceil(tasks - EPS)
        placed: dict[str, int] = {}
        for e in self._scheduling_order():
            n = min(self.cores_per_executor, max(0, left))
            left -= n
            placed[e.executor_id] = n
        return placed

    def speed(self, placement: Mapping[str, int]) -> float:
        """The average speed of the slots these tasks were placed on."""
        placed = [(n, self._live[eid].speed) for eid, n in placement.items() if n > 0 and eid in self._live]
        total = sum(n for n, _ in placed)
        return sum(n * s for n, s in placed) / total if total > 0 else 1.0

    def tasks_on_bad(self, placement: Mapping[str, int]) -> int:
        return sum(n for eid, n in placement.items() if eid in self._live and self._live[eid].bad)

    def fail_tasks(self, placement: Mapping[str, int], failed: float) -> None:
        """Record ``failed`` task attempts on the bad executors of ``placement``, in proportion
        to the tasks placed on each."""
        bad = {eid: n for eid, n in placement.items()
               if n > 0 and eid in self._live and self._live[eid].bad}
        total = sum(bad.values())
        for eid, n in bad.items():
            self._live[eid].failed += failed * n / total

    def set_running(self, tasks: float) -> None:
        """The tasks running at this instant, spread oldest first. Bad executors are reported
        idle: their tasks fail within moments of starting."""
        placement = self.place_tasks(tasks)
        for e in self._live.values():
            e.running_tasks = 0 if e.bad else placement.get(e.executor_id, 0)
        for eid in list(self._when_idle):
            if self.live_count <= self._when_idle_target:
                self._when_idle = []
                break
            e = self._live.get(eid)
            if e is None or eid in self._removing:
                self._when_idle.remove(eid)
            elif e.running_tasks == 0:
                # Killed as it goes idle, the target untouched; listed until the kill delay ends.
                self._when_idle.remove(eid)
                self._removing[eid] = self.now + self.kill_delay_s
                self._removal_reason[eid] = KILLED_BY_DRIVER
                self._order = None
                self._removed_idle.append(eid)

    def _scheduling_order(self) -> list[_Executor]:
        if self._order is None:  # cached: changes only when executors come, go or are killed
            self._order = sorted((e for e in self._live.values() if e.executor_id not in self._removing),
                                 key=lambda e: (e.added_time, int(e.executor_id)))
        return self._order

    def infos(self) -> tuple[ExecutorInfo, ...]:
        """The executors as the listener lists them: a killed one stays until its removal."""
        live = [ExecutorInfo(e.executor_id, host="sim", cores=self.cores_per_executor,
                             running_tasks=e.running_tasks, added_time=e.added_time,
                             tasks_failed=int(e.failed + EPS), heap_used_ratio=self.heap_used_ratio)
                for e in self._live.values()]
        gone = [ExecutorInfo(e.executor_id, host="sim", cores=self.cores_per_executor,
                             added_time=e.added_time, removed_time=e.removed_time,
                             removed_reason=e.removed_reason, tasks_failed=int(e.failed + EPS))
                for e in self._removed[-20:]]
        return tuple(live + gone)

    def _start_fails(self, requested: float) -> bool:
        return self.start_failure_from is not None and requested >= self.start_failure_from - EPS

    def _register(self, at: float, requested: float, initial: bool = False) -> str:
        self._next_id += 1
        eid = str(self._next_id)
        bad = (not initial and self.bad_executors_from is not None
               and requested >= self.bad_executors_from - EPS)
        slow = (not initial and self.slow_executors_from is not None
                and requested >= self.slow_executors_from - EPS)
        self._live[eid] = _Executor(eid, at, requested, bad=bad, speed=self.slow_speed if slow else 1.0)
        self._order = None
        self.executors_added += 1
        if at > requested:
            self.provisioning_observed.append(at - requested)
        return eid

    def _remove(self, executor_id: str, at: float, reason: str) -> None:
        e = self._live.pop(executor_id)
        self._order = None
        e.removed_time, e.removed_reason, e.running_tasks = at, reason, 0
        self._removed.append(e)
        self._removed = self._removed[-100:]
        self._failed_removed += e.failed
        self.executors_removed += 1

    def _reconcile(self) -> None:
        limit = self.effective_target
        have = self.live_count + len(self._pending)
        if have < limit:
            self._pending.extend([self.now] * (limit - have))
        elif have > limit and self._pending:
            # Cancel launches not needed any more; running executors are never touched, nor
            # launches past launch_commit_s.
            keep = max(0, limit - self.live_count)
            if self.launch_commit_s is None:
                self._pending = self._pending[:keep]
            else:
                committed = [r for r in self._pending if self.now - r >= self.launch_commit_s - EPS]
                cancellable = [r for r in self._pending if self.now - r < self.launch_commit_s - EPS]
                self._pending = committed + cancellable[:max(0, keep - len(committed))]
