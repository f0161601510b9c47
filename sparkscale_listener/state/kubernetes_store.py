"""Autoscaler state in a Kubernetes ConfigMap, one per application (``stateStore=kubernetes``).

A driver that runs as a pod has no durable disk: its SQLite file would die with it. Like Flink's
Kubernetes operator, which keeps a job's autoscaler state in a ConfigMap, this store keeps the
application's values and history rows in one ConfigMap named after it (``sparkscale-<app>``), so
a restarted driver pod finds the pause and the last healthy size where the old one left them.

The API server is reached with the standard library only, at the address and with the credentials
Spark's own driver uses (:func:`resolve_api_access`). The ConfigMap is read once, at first use, and
written once per control tick (:meth:`KubernetesStateStore.commit`), with the ``resourceVersion``
it was read at: a concurrent writer makes that write fail with 409, and the store then starts again
from what the other wrote, with its own changes on top.

The driver's service account needs the verbs ``get``, ``create`` and ``update`` on ``configmaps``
in the state's namespace (``create`` only while the ConfigMap does not exist yet). The ConfigMap
outlives the application on purpose; delete it to make the application start afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import string
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..config.options import Description, ValueType
from .kubernetes_api import (
    SERVICE_ACCOUNT_DIR,
    ApiAccess,
    ConfigMapClient,
    KubernetesApiError,
    resolve_api_access,
    resolve_namespace,
)
from .store import (
    DEFAULT_MAX_RECORDS,
    InMemoryStateStore,
    StateStore,
    check_record,
    encode_json,
    report_fallback,
)

log = logging.getLogger("sparkscale")

# A ConfigMap holds at most 1 MiB of data; the rest of the object (its metadata) needs room too.
MAX_CONFIGMAP_BYTES = 900_000
FORMAT_VERSION = 1  # of the data layout (see ConfigMapData); a newer one is left untouched
CONFLICT_ATTEMPTS = 5  # writes per commit while other writers keep coming first
MAX_NAME_LENGTH = 253  # of a ConfigMap's name (a DNS-1123 subdomain) and of a data key
MANAGED_BY = {"app.kubernetes.io/managed-by": "sparkscale"}
RBAC_HINT = ("the driver's service account needs the verbs get, create and update on configmaps in "
             "namespace {}")

Identity = tuple[str, str, str]  # (application, scope, key or kind)

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_KEY_CHARACTERS = frozenset(string.ascii_letters + string.digits + "-")


class KubernetesName(ValueType):
    """The name of a Kubernetes object, or empty (then the store derives it): a DNS-1123 label (a
    namespace) or subdomain (a ConfigMap), which the API server would refuse otherwise."""

    def __init__(self, subdomain: bool) -> None:
        self.max_length = MAX_NAME_LENGTH if subdomain else 63
        self.pattern = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*" if subdomain else _DNS_LABEL)
        self.kind = "subdomain" if subdomain else "label"
        self.characters = "a-z, 0-9, '-' and '.'" if subdomain else "a-z, 0-9 and '-'"
        self.accepts = (f"a DNS-1123 {self.kind} ({self.characters}, starting and ending with a letter or "
                        f"digit, at most {self.max_length} characters), or empty")

    def describe(self) -> Description:
        return Description("Kubernetes name", f"DNS-1123 {self.kind}: {self.characters}, at most "
                                              f"{self.max_length} characters; or empty")

    def convert(self, key: str, text: str) -> str:
        return str(text).strip()

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, str):
            raise self._reject(key, value, "is not a string")
        if value and (len(value) > self.max_length or not self.pattern.fullmatch(value)):
            raise self._reject(key, value, "is not a valid Kubernetes name")


def configmap_name(app: str) -> str:
    """``"Orders Job"`` -> ``"sparkscale-orders-job"``: the ConfigMap of an application's state.

    Names that differ only in what this drops (case, punctuation) share a ConfigMap, which is
    harmless: the entries inside carry the exact application name. One too long for Kubernetes is
    cut, with a digest of the whole name so that it stays apart."""
    readable = re.sub(r"[^a-z0-9]+", "-", app.lower()).strip("-")
    name = f"sparkscale-{readable}" if readable else "sparkscale"
    if len(name) > MAX_NAME_LENGTH:
        digest = hashlib.sha256(app.encode("utf-8", "surrogatepass")).hexdigest()[:12]
        name = f"{name[:MAX_NAME_LENGTH - len(digest) - 1].rstrip('-')}-{digest}"
    return name


def _escaped(part: str) -> str:
    return "".join(c if c in _KEY_CHARACTERS
                   else "".join(f"_{b:02x}" for b in c.encode("utf-8", "surrogatepass")) for c in part)


def data_key(kind: str, identity: Identity) -> str:
    """The ConfigMap data key of one value (``kind="value"``) or one history (``"history"``), e.g.
    ``value.orders-job._5fapp.policy`` for (``orders-job``, ``_app``, ``policy``).

    Kubernetes allows only ``[-._a-zA-Z0-9]`` in a key: every other character, and ``_`` (the
    escape) and ``.`` (the separator), is written as ``_`` and its UTF-8 bytes in hex, so distinct
    names never share a key. A key longer than Kubernetes allows is the kind and a digest of the
    names instead (two parts, never four); the entry names what it holds either way."""
    key = ".".join([kind, *(_escaped(part) for part in identity)])
    if len(key) <= MAX_NAME_LENGTH:
        return key
    digest = hashlib.sha256(json.dumps(identity).encode()).hexdigest()
    return f"{kind}.{digest}"


def data_size(data: Mapping[str, str]) -> int:
    """Bytes of a ConfigMap's data as Kubernetes counts them against its limit."""
    return sum(len(key.encode()) + len(value.encode()) for key, value in data.items())


class UnusableConfigMap(Exception):
    """The ConfigMap holds data this store cannot read (not its layout, or a newer one): left as it is."""


def _entry(names: dict[str, str], field: str, payload: str) -> str:
    """``{"app":..,"scope":..,"key":..,"value":<payload>}``, the payload (JSON text) verbatim."""
    head = json.dumps(names, separators=(",", ":"))
    return f'{head[:-1]},"{field}":{payload}}}'


class ConfigMapData:
    """The store's content as its ConfigMap's ``data`` holds it, and the changes of a tick.

    ``format`` is the layout's version; every other key (:func:`data_key`) is one value or one
    history, a JSON object that names what it holds: ``{"app", "scope", "key", "value"}`` or
    ``{"app", "scope", "kind", "rows"}``, its rows oldest first, at most ``max_records``. Values and
    rows are kept as JSON text, as the other stores keep them, and written back verbatim."""

    def __init__(self, max_records: int) -> None:
        self.max_records = max_records
        self.values: dict[Identity, str] = {}
        self.histories: dict[Identity, list[str]] = {}

    def __bool__(self) -> bool:
        return bool(self.values or self.histories)

    def put(self, identity: Identity, text: str) -> None:
        self.values[identity] = text

    def append(self, identity: Identity, text: str) -> None:
        rows = self.histories.setdefault(identity, [])
        rows.append(text)
        del rows[:-self.max_records]

    def merge(self, changes: ConfigMapData) -> None:
        """Apply ``changes`` (another writer's content came first: this tick's go on top)."""
        self.values.update(changes.values)
        for identity, rows in changes.histories.items():
            for row in rows:
                self.append(identity, row)

    def to_data(self) -> dict[str, str]:
        data = {"format": str(FORMAT_VERSION)}
        for (app, scope, key), text in self.values.items():
            data[data_key("value", (app, scope, key))] = _entry({"app": app, "scope": scope, "key": key},
                                                                "value", text)
        for (app, scope, kind), rows in self.histories.items():
            data[data_key("history", (app, scope, kind))] = _entry({"app": app, "scope": scope, "kind": kind},
                                                                   "rows", f"[{','.join(rows)}]")
        return data

    def fitted(self, max_bytes: int) -> tuple[dict[str, str], int]:
        """The data to write, within ``max_bytes``, and how many history rows were dropped for it.

        Each row dropped is the oldest of the largest history at that moment, so that one busy
        history (scaling reasons) cannot wipe out a small one (provisioning times). Values are never
        dropped: raises ValueError when they alone do not fit."""
        data = self.to_data()
        total = data_size(data)
        if total <= max_bytes:
            return data, 0
        sizes = {identity: len(key) + len(data[key]) for identity in self.histories
                 for key in (data_key("history", identity),)}
        dropped = 0
        while total > max_bytes:
            if not sizes:
                raise ValueError(f"its values alone take {total} bytes, more than the {max_bytes} a "
                                 "ConfigMap is given")
            identity = max(sizes, key=sizes.__getitem__)
            rows = self.histories[identity]
            row = rows.pop(0)
            dropped += 1
            if rows:
                sizes[identity] -= len(row) + 1  # the row and its comma
                total -= len(row) + 1
            else:
                total -= sizes.pop(identity)
                del self.histories[identity]
        return self.to_data(), dropped

    @classmethod
    def parse(cls, data: Mapping[str, str] | None, max_records: int) -> ConfigMapData:
        """The content of a ConfigMap's ``data``; an empty one is an empty store (a ConfigMap made
        beforehand, e.g. so that the service account needs no ``create``). Raises
        :class:`UnusableConfigMap` for anything else this store did not write."""
        content = cls(max_records)
        entries = dict(data or {})
        version = entries.pop("format", None)
        if version is None:
            if entries:
                shown = ", ".join(sorted(entries)[:3])
                raise UnusableConfigMap(f"it holds keys this store does not write ({shown}...) and no "
                                        "'format' key")
            return content
        if version != str(FORMAT_VERSION):
            raise UnusableConfigMap(f"its format {version!r} is not this sparkscale's ({FORMAT_VERSION})")
        for key, text in entries.items():
            try:
                content._parse_entry(key, text)
            except (ValueError, KeyError, TypeError) as err:
                raise UnusableConfigMap(f"its entry {key!r} cannot be read ({type(err).__name__}: "
                                        f"{err})") from None
        return content

    def _parse_entry(self, key: str, text: str) -> None:
        entry = json.loads(text)
        kind = key.split(".", 1)[0]
        name_field = {"value": "key", "history": "kind"}.get(kind)
        if name_field is None or not isinstance(entry, dict):
            raise ValueError("not a value or a history of this store")
        identity = (entry["app"], entry["scope"], entry[name_field])
        if not all(isinstance(part, str) for part in identity):
            raise TypeError("its app, scope and name must be strings")
        if kind == "value":
            self.values[identity] = encode_json(entry["value"], "values")
            return
        rows = entry["rows"]
        if not isinstance(rows, list):
            raise TypeError("its rows must be a list")
        for row in rows:
            check_record(row)
            self.append(identity, encode_json(row, "records"))


def kubernetes_state_store(options: Mapping[str, Any], spark_conf: Mapping[str, str],
                           on_fallback: Callable[[str], None] | None = None, *,
                           environ: Mapping[str, str] = os.environ,
                           service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> KubernetesStateStore:
    """The store ``stateStore=kubernetes`` names: ``options`` are its keys under ``stateStore.``
    (read and checked), ``spark_conf`` Spark's conf (the application name, the API server)."""
    return KubernetesStateStore(
        resolve_api_access(spark_conf, environ, service_account_dir),
        options["kubernetes.namespace"] or resolve_namespace(spark_conf, service_account_dir),
        options["kubernetes.configMap"] or configmap_name(spark_conf.get("spark.app.name", "")),
        max_records=options["maxRecords"], on_fallback=on_fallback)


class KubernetesStateStore(StateStore):
    """State in one ConfigMap per application, surviving the driver pod (see the module's docstring).

    Reads are served from the copy read at first use, which the store's own writes keep current; a
    value read while nothing waits to be written is read afresh (the control loop reads values only
    when it starts, and then every tick while it decides whether another run's heartbeat still
    beats: a copy would show a live run as stopped). ``put`` and ``append`` change that copy and are
    written by :meth:`commit`, once per tick: the ConfigMap is created if it does not exist, replaced
    with the ``resourceVersion`` read otherwise, and on a conflict read again and the tick's changes
    applied anew (a few times at most). A write
    that fails raises from :meth:`commit` (the control loop reports it) and the changes are written
    at the next commit; one whose reply was lost may then add its history rows twice.

    The ConfigMap is kept under :data:`MAX_CONFIGMAP_BYTES` (900 KB; Kubernetes refuses a ConfigMap
    over 1 MiB) by dropping the oldest history rows beyond that, on top of ``max_records`` per
    history; values are never dropped.

    Opening is never fatal: with no API server known, the server unreachable, the read refused
    (403: the service account lacks RBAC) or a ConfigMap this store cannot read (which it leaves as
    it is), the store keeps its state in memory, and :attr:`fell_back` and ``on_fallback`` say why.
    """

    def __init__(self, api: ApiAccess, namespace: str, name: str, *, max_records: int = DEFAULT_MAX_RECORDS,
                 max_bytes: int = MAX_CONFIGMAP_BYTES,
                 on_fallback: Callable[[str], None] | None = None) -> None:
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.max_records = max_records
        self.max_bytes = max_bytes
        self.on_fallback = on_fallback
        self.fell_back = None
        self._client = ConfigMapClient(api, namespace, name) if api.url else None
        self._lock = threading.RLock()
        self._content: ConfigMapData | None = None  # read at first use
        self._configmap: dict[str, Any] | None = None  # as last read or written; None: not on the server
        self._pending = ConfigMapData(max_records)  # changes not written yet
        self._memory: InMemoryStateStore | None = None  # set once we gave up on the ConfigMap
        self._trimmed = 0  # history rows dropped to fit, so far
        self._closed = False

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    # -- opening --------------------------------------------------------------------------------

    def _opened(self) -> ConfigMapData | None:
        """The content (read now if this is the first use), or None when the state is in memory."""
        if self._closed:
            raise RuntimeError("state store is closed")
        if self._content is None and self._memory is None:
            self._open()
        return self._content

    def _open(self) -> None:
        if self._client is None:
            self._use_memory(f"state store {self.where}: {self.api.missing}")
            return
        try:
            found = self._client.read()
            self._content = ConfigMapData.parse((found or {}).get("data"), self.max_records)
            self._configmap = found
        except KubernetesApiError as err:
            self._use_memory(f"state store {self.where} at {self.api.url} cannot be read "
                             f"({err}){self._hint(err)}")
        except UnusableConfigMap as err:
            self._use_memory(f"state store {self.where} cannot be used ({err}); it is left as it is")

    def _hint(self, err: KubernetesApiError) -> str:
        if err.status == 403:
            return "; " + RBAC_HINT.format(self.namespace)
        if err.status == 401:
            return "; the API server did not accept the driver's token"
        return ""

    def _use_memory(self, why: str) -> None:
        self._memory = InMemoryStateStore(self.max_records)
        report_fallback(self, f"{why}; keeping state in memory (it will not survive a restart)",
                        self.on_fallback)

    # -- operations -----------------------------------------------------------------------------

    def get(self, app: str, scope: str, key: str) -> Any | None:
        with self._lock:
            fresh = self._content is None
            content = self._opened()
            if content is None:
                assert self._memory is not None
                return self._memory.get(app, scope, key)
            if not fresh and not self._pending:
                content = self._reread(content)
            text = content.values.get((app, scope, key))
        return None if text is None else json.loads(text)

    def _reread(self, content: ConfigMapData) -> ConfigMapData:
        """The ConfigMap as it is now (the copy when it cannot be read: a read is never fatal)."""
        assert self._client is not None
        try:
            found = self._client.read()
            self._content = ConfigMapData.parse((found or {}).get("data"), self.max_records)
            self._configmap = found
            return self._content
        except (KubernetesApiError, UnusableConfigMap) as err:
            log.debug("state store %s: read again failed (%s); using the copy", self.where, err)
            return content

    def put(self, app: str, scope: str, key: str, value: Any) -> None:
        text = encode_json(value, "values")
        with self._lock:
            content = self._opened()
            if content is None:
                assert self._memory is not None
                self._memory.put(app, scope, key, value)
                return
            content.put((app, scope, key), text)
            self._pending.put((app, scope, key), text)

    def append(self, app: str, scope: str, kind: str, record: dict[str, Any]) -> None:
        check_record(record)
        text = encode_json(record, "records")
        with self._lock:
            content = self._opened()
            if content is None:
                assert self._memory is not None
                self._memory.append(app, scope, kind, record)
                return
            content.append((app, scope, kind), text)
            self._pending.append((app, scope, kind), text)

    def records(self, app: str, scope: str, kind: str, limit: int = 100) -> list[dict[str, Any]]:
        if limit <= 0:
            return []
        with self._lock:
            content = self._opened()
            if content is None:
                assert self._memory is not None
                return self._memory.records(app, scope, kind, limit)
            rows = content.histories.get((app, scope, kind), [])[-limit:]
        return [json.loads(text) for text in rows]

    def commit(self) -> None:
        """Write the ConfigMap if anything changed since the last write (see the class docstring)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("state store is closed")
            if self._content is None or not self._pending:
                return
            for _ in range(CONFLICT_ATTEMPTS):
                if self._write_once():
                    self._pending = ConfigMapData(self.max_records)
                    return
            raise KubernetesApiError(409, f"writing state store {self.where}: another writer changed it "
                                          f"before each of {CONFLICT_ATTEMPTS} attempts; the changes are "
                                          "kept and written at the next tick")

    def _write_once(self) -> bool:
        """One create or replace; False when another writer came first (then read again)."""
        assert self._content is not None and self._client is not None
        try:
            data, dropped = self._content.fitted(self.max_bytes)
        except ValueError as err:
            raise ValueError(f"state store {self.where} cannot be written: {err}") from None
        self._report_trimmed(dropped)
        try:
            if self._configmap is None:
                self._configmap = self._client.create(self._new_configmap(data))
            else:
                self._configmap = self._client.replace({**self._configmap, "data": data})
            return True
        except KubernetesApiError as err:
            if err.status == 404 and self._configmap is not None:  # deleted since read: create it anew
                self._configmap = None
                return False
            if err.status != 409:
                raise KubernetesApiError(err.status, f"writing state store {self.where} failed ({err})"
                                         f"{self._hint(err)}; the changes are kept and written at the "
                                         "next tick") from None
        # Another writer came first (an old driver's last tick, a concurrent run of the application):
        # start again from what it wrote, with this tick's changes on top.
        again = f"reading state store {self.where} again after a conflicting write failed"
        try:
            found = self._client.read()
        except KubernetesApiError as err:
            raise KubernetesApiError(err.status, f"{again} ({err}){self._hint(err)}; the changes are kept "
                                                 "and written at the next tick") from None
        try:
            content = ConfigMapData.parse((found or {}).get("data"), self.max_records)
        except UnusableConfigMap as err:
            raise UnusableConfigMap(f"{again}: another writer left what this store cannot read ({err}); the "
                                    "changes are kept and written at the next tick") from None
        content.merge(self._pending)
        self._content, self._configmap = content, found
        return False

    def _new_configmap(self, data: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(MANAGED_BY)},
                "data": data}

    def _report_trimmed(self, dropped: int) -> None:
        if not dropped:
            return
        # Once full it stays full: one warning when it starts, the rest in the debug log.
        level = logging.DEBUG if self._trimmed else logging.WARNING
        self._trimmed += dropped
        log.log(level, "state store %s reached its %d bytes: dropped its %d oldest history rows (%d so far)",
                self.where, self.max_bytes, dropped, self._trimmed)

    def close(self) -> None:
        """Closes without writing: the control loop commits its last changes first (its ``release``)."""
        with self._lock:
            self._closed = True
            if self._memory is not None:
                self._memory.close()
