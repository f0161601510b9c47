"""The control loop's typed state: what must survive a tick, and with a persistent store, a driver
restart (:class:`AutoscalerState` over a :class:`~sparkscale_listener.state.store.StateStore`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from .store import APP_SCOPE, StateStore


class AutoscalerState:
    """The control loop's typed view of a :class:`StateStore`: one method per thing it keeps, so
    no string key appears at a call site. Writes are collected during a tick and written by
    :meth:`flush`, once at its end (like Flink's state store); reads go to the store (they happen
    at start, when restoring). Every store call is best effort: a failure is handed to
    ``on_error(where, exception)`` (the control loop reports it) and the tick goes on.

    State is kept under the application's name, so that a restarted driver (a new application id)
    finds it. Two runs of one application at the same time must not share it: with a ``run_id``
    (the Spark application id) the state carries an owner and a heartbeat, see :meth:`claim`.
    """

    def __init__(self, store: StateStore, app: str,
                 on_error: Callable[[str, BaseException], None], run_id: str | None = None) -> None:
        self.store = store
        self.app = app  # the key the state lives under (changed by claim() for a concurrent run)
        self.run_id = run_id
        self._on_error = on_error
        # The verdict of claim(), once decided; without a run id there is nothing to decide.
        self._verdict: str | None = "owned" if run_id is None else None
        self._seen: tuple[float, float] | None = None  # (other owner's heartbeat, when we saw it)
        self._values: dict[str, Any] = {}  # key -> value, written at the next flush()
        self._records: list[tuple[str, dict[str, Any]]] = []  # (kind, row), appended then
        self._written: dict[str, str] = {}  # key -> the JSON last written: unchanged ones are skipped

    def flush(self) -> None:
        """Write what the tick changed: the latest value of each key, then the new history rows, then
        the store's :meth:`~StateStore.commit`. The commit comes every tick, changes or not: a store
        whose last write failed writes what it kept then."""
        values, records = self._values, self._records
        self._values, self._records = {}, []
        changed = {}
        for key, value in values.items():
            text = json.dumps(value, sort_keys=True, default=str)
            if self._written.get(key) != text:
                changed[key] = (value, text)
        # A class path may name a store that only has the required methods (see STATE_STORE_METHODS).
        commit = getattr(self.store, "commit", None)
        if not changed and not records and commit is None:
            return

        def op() -> None:
            for key, (value, text) in changed.items():
                self.store.put(self.app, APP_SCOPE, key, value)
                self._written[key] = text
            for kind, row in records:
                self.store.append(self.app, APP_SCOPE, kind, row)
            if commit is not None:
                commit()
        self._guarded("state store", op)

    def _guarded(self, where: str, op: Callable[[], Any], default: Any = None) -> Any:
        try:
            return op()
        except Exception as exc:
            self._on_error(where, exc)
            return default

    # -- ownership: a restart takes the state over, a concurrent run keeps its own ------------------

    def claim(self, now: float, stale_after_s: float) -> str | None:
        """Try to own the application's state; call every tick until it returns a verdict.

        None: undecided, another run's heartbeat was fresh when first seen: if it keeps beating,
        that run is alive (a concurrent run); if it stays still for ``stale_after_s``, it was this
        application's crashed driver. "owned": this run owns ``self.app``'s state (restore it).
        "separate": another run is alive, this run keeps its state apart (nothing to restore).
        """
        if self._verdict is not None:
            return self._verdict
        owner = self._guarded("state store (owner)", lambda: self.store.get(self.app, APP_SCOPE, "owner"))
        beat = owner.get("heartbeat") if isinstance(owner, dict) else None
        fresh = (isinstance(beat, (int, float)) and not isinstance(beat, bool)
                 and owner.get("run") != self.run_id and now - float(beat) < stale_after_s)
        if fresh:
            if self._seen is None:
                self._seen = (float(beat), now)
                return None
            if float(beat) > self._seen[0]:  # it beats: alive, a concurrent run
                self.app = f"{self.app} [{self.run_id}]"
                self._verdict = "separate"
                return self._verdict
            if now - self._seen[1] < stale_after_s:
                return None
        self._verdict = "owned"
        self.heartbeat(now)
        return self._verdict

    def heartbeat(self, now: float) -> None:
        """This run owns the state and is alive."""
        if self.run_id is not None and self._verdict is not None:
            self._values["owner"] = {"run": self.run_id, "heartbeat": now}

    def release(self) -> None:
        """A clean stop: the next run need not wait for the heartbeat to go stale."""
        if self.run_id is not None and self._verdict is not None:
            self._values["owner"] = {"run": self.run_id, "heartbeat": None}
        self.flush()

    # -- the policy's memory: a pending scale-down, blocked scale-ups ------------------------------

    def policy_state(self) -> dict[str, Any] | None:
        value = self._guarded("state store (restore)", lambda: self.store.get(self.app, APP_SCOPE, "policy"))
        return value if isinstance(value, dict) else None

    def store_policy_state(self, state: dict[str, Any]) -> None:
        self._values["policy"] = state

    # -- each query's forecast of its arrivals: its history and profile ----------------------------

    def forecast_state(self) -> dict[str, Any] | None:
        """What :meth:`ArrivalForecasts.to_state` stored last, or None."""
        value = self._guarded("state store (restore)",
                              lambda: self.store.get(self.app, APP_SCOPE, "forecast"))
        return value if isinstance(value, dict) else None

    def store_forecast_state(self, state: dict[str, Any]) -> None:
        self._values["forecast"] = state

    # -- the rollback guard and the scaling it rolled back ------------------------------------

    def rollback_guard(self) -> dict[str, Any] | None:
        """What :meth:`RollbackGuard.to_state` stored last, or None."""
        value = self._guarded("state store (restore)",
                              lambda: self.store.get(self.app, APP_SCOPE, "guard"))
        return value if isinstance(value, dict) and value else None

    def rolled_back_scaling(self) -> dict[str, Any] | None:
        """The last scaling a checker rolled back ({"action", "to", "time", ...}), or None."""
        value = self._guarded("state store (restore)",
                              lambda: self.store.get(self.app, APP_SCOPE, "rolledBack"))
        return value if isinstance(value, dict) and {"action", "to", "time"} <= set(value) else None

    def store_rollback_state(self, guard: dict[str, Any], rolled_back: dict[str, Any] | None) -> None:
        self._values["guard"] = guard
        self._values["rolledBack"] = rolled_back

    # -- history ----------------------------------------------------------------------------------

    def record_scaling(self, now: float, action: str, from_executors: int, to_executors: int,
                       reason: str) -> None:
        record = {"time": now, "action": action, "from": from_executors, "to": to_executors,
                  "reason": reason}
        self._records.append(("scaling", record))

    def record_provisioning(self, now: float, seconds: float, executors: int,
                            timed_out: bool = False) -> None:
        record = {"time": now, "seconds": seconds, "executors": executors, "timedOut": timed_out}
        self._records.append(("provisioning", record))

    def provisioning_seconds(self, limit: int) -> list[float]:
        """The newest ``limit`` request -> registered observations, oldest first."""
        rows = self._guarded("state store (restore)",
                             lambda: self.store.records(self.app, APP_SCOPE, "provisioning", limit=limit),
                             default=[])
        return [float(r["seconds"]) for r in rows if "seconds" in r]

    def close(self) -> None:
        self.store.close()
