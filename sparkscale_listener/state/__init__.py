"""State: the pluggable key-value and history store (:mod:`.store`) and the control loop's typed
view of it (:mod:`.autoscaler_state`)."""

from .autoscaler_state import AutoscalerState
from .store import InMemoryStateStore, SqliteStateStore, StateStore, build_state_store

__all__ = ["AutoscalerState", "InMemoryStateStore", "SqliteStateStore", "StateStore", "build_state_store"]
