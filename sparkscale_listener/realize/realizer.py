"""Realization: carrying an absolute executor target out on the cluster, safely."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

from ..metrics import executor_id_order


class ClusterBackend(ABC):
    """The executor API of the cluster manager: SparkContext in production, a model in the
    simulator. Absolute targets only: if nothing was ever requested, Spark's first kill sets the
    cluster manager's target to zero and no executor is ever replaced (the empty-target trap)."""

    @abstractmethod
    def executor_ids(self) -> list[str]: ...

    @abstractmethod
    def running_tasks(self) -> dict[str, int]:
        """Running task count per live executor."""

    @abstractmethod
    def request_total(self, total: int) -> bool:
        """Ask the cluster manager for this many executors in all."""

    @abstractmethod
    def kill(self, executor_ids: Sequence[str], force: bool = False) -> list[str]:
        """Kill these executors without replacing them; returns the ids actually killed. Without
        ``force``, an executor running a task is skipped."""

    def decommission(self, executor_ids: Sequence[str]) -> list[str]:
        """Gracefully decommission; defaults to kill where the backend cannot."""
        return self.kill(executor_ids)

    def pinned(self) -> set[str]:
        """Executors that must not be removed now although idle: they hold shuffle output a running
        micro-batch still has to read (removing one fails its tasks with FetchFailed)."""
        return set()

    def remove_when_idle(self, executor_ids: Sequence[str], target: int) -> None:
        """Remove these busy executors as soon as their running tasks end while more than
        ``target`` executors are live, without lowering the target (replacing the ones named
        before; none cancels). A backend that cannot leaves them to the next
        :meth:`ExecutorRealizer.realize`."""
        return None

    def removed_when_idle(self) -> list[str]:
        """The executors :meth:`remove_when_idle` removed since the last call."""
        return []


@dataclass(frozen=True)
class RealizationResult:
    requested_total: int  # the target the cluster manager now has
    # Executors killed or decommissioned by this call (or by the backend since the last one):
    # every one of them, since only these are the autoscaler's own removals (a decommission of
    # any other is the cluster's, and its replacement is waited for).
    removed: tuple[str, ...] = ()
    ok: bool = True
    message: str = ""


class ScalingRealizer(ABC):
    """Carries an absolute executor target out. Pluggable (`spark.sparkscale.realizer`,
    constructed with a :class:`~sparkscale_listener.config.plugins.PluginContext` whose ``backend`` is
    the cluster's executor API; a custom realizer may wrap :class:`ExecutorRealizer` over it).

    The control loop calls :meth:`baseline` once, when the first executors have registered, and
    :meth:`realize` for every applied decision or rollback. Both return what the cluster manager
    was asked for; neither may kill an executor that is running a task.
    """

    @abstractmethod
    def baseline(self, total: int) -> RealizationResult:
        """Set the cluster manager's target to ``total`` without removing anything."""

    @abstractmethod
    def realize(self, target: int, remove_first: Collection[str] = ()) -> RealizationResult:
        """Move towards ``target`` executors: request more, or remove idle ones.

        ``remove_first``: executors to remove before any other, busy or not (a rollback passes
        the executors the rolled-back scaling added: their tasks fail anyway). The result names
        every executor removed (:attr:`RealizationResult.removed`), also when a request fails
        after a removal: return that failure (``ok`` False), do not raise it."""

    @property
    @abstractmethod
    def requested_total(self) -> int:
        """The executor total the cluster manager currently has as its target."""


class ExecutorRealizer(ScalingRealizer):
    """The built-in realizer over a :class:`ClusterBackend`.

    Scale-up raises the absolute target (never relative: see the empty-target trap). Scale-down
    removes only idle executors, newest first (they hold the least cached state), then pins the
    absolute target so the cluster manager does not replace them; if too few are idle it names the
    busy ones to remove the moment their running tasks end (a tick that falls while every executor
    runs a batch's tasks keeps falling there while the tick and the trigger stay in step), and the
    next tick does the rest where the backend cannot.
    """

    def __init__(self, backend: ClusterBackend, min_executors: int, decommission: bool = False) -> None:
        self.backend = backend
        self.min_executors = min_executors
        self.decommission = decommission
        self._requested = 0
        # Executors we removed that the scheduler still lists (removal takes seconds): they are
        # neither counted as live nor chosen again, or the next tick would re-request them.
        self._removing: set[str] = set()

    @property
    def requested_total(self) -> int:
        return self._requested

    def baseline(self, total: int) -> RealizationResult:
        return self._request(total)

    def realize(self, target: int, remove_first: Collection[str] = ()) -> RealizationResult:
        target = max(target, self.min_executors)
        listed = self.backend.executor_ids()
        # Removed by the backend since the last call, when their tasks ended: gone, or going.
        removed: list[str] = [e for e in self.backend.removed_when_idle() if e in listed]
        self._removing.update(removed)
        self._removing &= set(listed)
        live = [e for e in listed if e not in self._removing]
        if target >= len(live):
            self.backend.remove_when_idle((), target)
            result = self._request(target)
            return replace(result, removed=tuple(removed)) if removed else result
        excess = len(live) - target
        now: list[str] = []  # removed by this call
        # Executors known to be bad go first, busy or not.
        suspects = set(remove_first)
        bad = [e for e in live if e in suspects][:excess]
        if bad:
            now += self.backend.kill(bad, force=True)
        # Then only executors with no running task and no shuffle output a running job needs;
        # newest first (ids are numeric strings on every cluster manager Spark ships, but do not
        # rely on it). The backend checks both again as it removes them.
        running = self.backend.running_tasks()
        pinned = self.backend.pinned() if len(now) < excess else set()
        idle = sorted((e for e in live if running.get(e, 0) == 0 and e not in now and e not in pinned),
                      key=executor_id_order, reverse=True)
        victims = idle[: excess - len(now)]
        if victims:
            now += (self.backend.decommission(victims) if self.decommission
                    else self.backend.kill(victims))
        self._removing.update(now)
        # Always end on the absolute target: a kill lowers the target by one per executor from
        # wherever it was.
        result = self._request(target)
        short = len(live) - target - len(now)
        # The rest are busy (or hold shuffle output a running batch reads): removed the moment their
        # tasks end, newest first; a later call names them again or does it where the backend cannot.
        # None while the cluster manager fails requests: Spark marks an executor it is asked to
        # remove as pending removal before asking, and a failed ask leaves it idle for good.
        left = sorted((e for e in live if e not in now), key=executor_id_order, reverse=True)
        self.backend.remove_when_idle(left[:max(0, short)] if result.ok else (), target)
        removed += now
        message = result.message or ("" if short <= 0 else
                                     f"{short} executor(s) busy or holding shuffle output of a running "
                                     "batch; they will be removed when their tasks end")
        return RealizationResult(requested_total=self._requested, removed=tuple(removed),
                                 ok=result.ok, message=message)

    def _request(self, total: int) -> RealizationResult:
        try:
            ok = self.backend.request_total(total)
        except Exception as exc:
            # A failed request like a refused one, not raised: the result must still name the
            # executors this call removed before it (a decommission not named reads as the
            # cluster's; see RealizationResult.removed).
            return RealizationResult(requested_total=self._requested, ok=False, message=error_text(exc))
        if ok:
            self._requested = total
        return RealizationResult(requested_total=self._requested, ok=ok,
                                 message="" if ok else f"the cluster manager refused a target of {total}")


def error_text(exc: BaseException) -> str:
    """A one-line account of a failed request. A Py4J error's text is the whole Java stack
    trace; the innermost cause says what happened (e.g. "Connection refused")."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            parts = [str(java.toString())]
            cause = java.getCause()
            while cause is not None and len(parts) < 5:
                parts.append(str(cause.toString()))
                cause = cause.getCause()
            return " <- ".join(p.strip() for p in parts)[:500]
        except Exception:
            pass  # the JVM may be gone: fall back to the text
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {' '.join(lines[:2])}"[:500]
