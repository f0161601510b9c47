"""State: the pluggable key-value and history store (:mod:`.store`: in memory, SQLite;
:mod:`.kubernetes_store`: a ConfigMap per application), the choice between them (:mod:`.loading`)
and the control loop's typed view of it (:mod:`.autoscaler_state`)."""

from .autoscaler_state import AutoscalerState
from .kubernetes_store import KubernetesStateStore
from .loading import build_state_store
from .store import InMemoryStateStore, SqliteStateStore, StateStore

__all__ = ["AutoscalerState", "InMemoryStateStore", "KubernetesStateStore", "SqliteStateStore", "StateStore",
           "build_state_store"]
