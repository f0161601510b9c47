"""Building the state store named in ``spark.sparkscale.stateStore``: a built-in (``memory``,
``sqlite``, ``kubernetes``) with its keys under ``stateStore.``, or a Python class path constructed
by the plugin convention."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..config.core import AutoscalerConfig
from ..config.options import PREFIX, ConfigError, Integer, Option, Text
from ..config.plugins import PluginContext, accepted_text, construct, load_class
from ..config.spelling import did_you_mean
from .kubernetes_store import KubernetesName, kubernetes_state_store
from .store import (
    DEFAULT_MAX_RECORDS,
    STATE_STORE_METHODS,
    InMemoryStateStore,
    KeptElsewhereStateStore,
    SqliteStateStore,
    StateStore,
)

BUILTIN_STATE_STORES = ("memory", "sqlite", "kubernetes")

# Keys of the built-in stores, under stateStore.
STATE_STORE_OPTIONS = (
    Option("maxRecords", Integer(minimum=1), DEFAULT_MAX_RECORDS, "history rows kept per "
           "application, scope and kind by the built-in stores"),
    Option("sqlite.path", Text(), "", "SQLite file for `stateStore=sqlite` (needed then)"),
    Option("kubernetes.namespace", KubernetesName(subdomain=False), "", "namespace of the state's "
           "ConfigMap for `stateStore=kubernetes`; empty: `spark.kubernetes.namespace`, else the driver "
           "pod's own namespace, else `default`"),
    Option("kubernetes.configMap", KubernetesName(subdomain=True), "", "name of the ConfigMap that holds "
           "the application's state for `stateStore=kubernetes`; empty: `sparkscale-` and the "
           "application name in lowercase letters, digits and dashes"),
)


def state_store_choice(config: AutoscalerConfig) -> tuple[str, Any]:
    """The store ``spark.sparkscale.stateStore`` names, checked without opening or constructing
    anything (it runs before the session starts too): ("memory", its options), ("sqlite", its
    options), ("kubernetes", its options) or ("class", the class)."""
    key = f"{PREFIX}stateStore"
    name = config.state_store.strip()
    options = config.module("stateStore.")
    if name.lower() in BUILTIN_STATE_STORES:
        values = options.read(STATE_STORE_OPTIONS)
        options.check_all_read()
        if name.lower() == "sqlite" and not values["sqlite.path"]:
            raise ConfigError(f"{key}=sqlite needs {PREFIX}stateStore.sqlite.path (the SQLite file "
                              "to use)")
        return name.lower(), values
    if "." not in name:
        accepted = accepted_text(StateStore, STATE_STORE_METHODS, BUILTIN_STATE_STORES)
        hint = did_you_mean(name, BUILTIN_STATE_STORES)
        raise ConfigError(f"{key}={name!r} is not accepted; {hint or 'expected ' + accepted}")
    return "class", load_class("stateStore", name, StateStore, STATE_STORE_METHODS,
                               accepted_names=BUILTIN_STATE_STORES)


def build_state_store(config: AutoscalerConfig, on_fallback: Callable[[str], None] | None = None,
                      spark_conf: Mapping[str, str] | None = None,
                      memory_kept_by: tuple[Callable[[], str | None], Callable[[str], None]] | None = None,
                      ) -> StateStore:
    """The store named by ``spark.sparkscale.stateStore``: memory, sqlite (at
    ``stateStore.sqlite.path``), kubernetes (a ConfigMap named after ``spark.app.name``, on the API
    server ``spark_conf``, Spark's whole conf, points to) or a Python class path, constructed as every
    plugin is (its options are the keys under ``stateStore.``). ``memory_kept_by``: where the memory
    store keeps its state beyond this process (load, save), for an agent that may be restarted.
    """
    kind, chosen = state_store_choice(config)
    if kind == "memory" and memory_kept_by is not None:
        return KeptElsewhereStateStore(*memory_kept_by, max_records=chosen["maxRecords"])
    if kind == "memory":
        return InMemoryStateStore(chosen["maxRecords"])
    if kind == "sqlite":
        return SqliteStateStore(chosen["sqlite.path"], max_records=chosen["maxRecords"],
                                on_fallback=on_fallback)
    if kind == "kubernetes":
        return kubernetes_state_store(chosen, spark_conf or {}, on_fallback)
    return construct(chosen, PluginContext(config, config.module("stateStore.")), "stateStore")
