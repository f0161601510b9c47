"""Autoscaler state: what must survive a tick (and, with SQLite or Kubernetes, a driver restart).

Like Flink's ``AutoScalerStateStore``, the store is keyed by application and scope: the application
*name* (stable across restarts, unlike the application id) and a query name, or ``"_app"`` for
application-wide state. It holds JSON-able values (``get``/``put``) and append-only history rows
(``append``/``records``): scaling history, provisioning-time observations, rollbacks.

State is an optimisation, never a reason to fail: a store that cannot be opened or written is
reported (``logging.warning`` and :attr:`StateStore.fell_back`) and replaced by a fresh one.

Why one module of ~450 lines: the interface and its two local implementations (in memory, SQLite)
change together; the SQLite one is most of it, with its locking and its fallback to memory. The
Kubernetes store (:mod:`.kubernetes_store`) and the choice between stores (:mod:`.loading`) have
modules of their own.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

try:  # POSIX only: serialises the "move a corrupt file aside" step between processes.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger("sparkscale")

APP_SCOPE = "_app"
DEFAULT_MAX_RECORDS = 1000
SCHEMA_VERSION = 1
STATE_STORE_METHODS = ("get", "put", "append", "records", "close")


class StateStore(ABC):
    """Keyed by application name and scope (a query name, or ``"_app"`` for application-wide
    state). Values and records must be JSON-able; what comes back is a fresh copy."""

    #: Why this store is not what was configured (a corrupt file replaced, an unusable path
    #: replaced by memory...), or None. The control loop turns it into an event.
    fell_back: str | None = None

    @abstractmethod
    def get(self, app: str, scope: str, key: str) -> Any | None: ...

    @abstractmethod
    def put(self, app: str, scope: str, key: str, value: Any) -> None: ...

    @abstractmethod
    def append(self, app: str, scope: str, kind: str, record: dict[str, Any]) -> None:
        """Add a history row (scaling history, provisioning-time observations, rollbacks)."""

    @abstractmethod
    def records(self, app: str, scope: str, kind: str, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` rows of that kind, oldest first (newest last)."""

    def commit(self) -> None:  # noqa: B027 - optional hook
        """The end of a control tick: the puts and appends since the last commit are complete.

        A store that writes remotely writes here, once per tick, instead of once per call (the
        Kubernetes store); one whose every call is durable keeps this no-op. Raises when that write
        fails; the store then keeps the changes and writes them at the next commit."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the file/connection. Further calls raise RuntimeError."""


def encode_json(value: Any, what: str) -> str:
    # Every store keeps JSON text, so a caller sees the same types (tuples come back as lists) and
    # gets a copy it may mutate, whichever store is configured.
    try:
        return json.dumps(value, separators=(",", ":"))
    except (TypeError, ValueError) as err:
        raise TypeError(f"state store {what} must be JSON-able: {err}") from None


def check_record(record: Any) -> None:
    if not isinstance(record, dict):
        raise TypeError(f"state store records must be dicts, got {type(record).__name__}")


def report_fallback(store: StateStore, why: str, on_fallback: Callable[[str], None] | None) -> None:
    """Say why ``store`` is not what was configured: :attr:`StateStore.fell_back`, a warning, and
    ``on_fallback`` (the control loop turns it into an event)."""
    store.fell_back = why
    log.warning("%s", why)
    if on_fallback is not None:
        try:
            on_fallback(why)
        except Exception:
            log.exception("state store on_fallback callback failed")


class InMemoryStateStore(StateStore):
    """State in the driver's heap: discarded when the application stops. The default."""

    def __init__(self, max_records: int = DEFAULT_MAX_RECORDS) -> None:
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        self.max_records = max_records
        self._values: dict[tuple[str, str, str], str] = {}
        # Bounded per (app, scope, kind): a driver may run for months.
        self._records: dict[tuple[str, str, str], deque[str]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("state store is closed")

    def get(self, app: str, scope: str, key: str) -> Any | None:
        with self._lock:
            self._check_open()
            text = self._values.get((app, scope, key))
        return None if text is None else json.loads(text)

    def put(self, app: str, scope: str, key: str, value: Any) -> None:
        text = encode_json(value, "values")
        with self._lock:
            self._check_open()
            self._values[(app, scope, key)] = text

    def append(self, app: str, scope: str, kind: str, record: dict[str, Any]) -> None:
        check_record(record)
        text = encode_json(record, "records")
        with self._lock:
            self._check_open()
            rows = self._records.setdefault((app, scope, kind), deque(maxlen=self.max_records))
            rows.append(text)

    def records(self, app: str, scope: str, kind: str, limit: int = 100) -> list[dict[str, Any]]:
        if limit <= 0:
            return []
        with self._lock:
            self._check_open()
            rows = list(self._records.get((app, scope, kind), ()))[-limit:]
        return [json.loads(text) for text in rows]

    def close(self) -> None:
        with self._lock:
            self._closed = True


class KeptElsewhereStateStore(InMemoryStateStore):
    """The memory store of an autoscaler whose process may be restarted while its application runs
    (the agent beside a driver): every value and row, saved as one JSON text with ``save`` at each
    commit that follows a change, and taken over from ``load`` when constructed. The agent keeps it
    in the driver's heap, so that a restarted agent goes on from the last healthy size and a pause
    instead of starting afresh; it ends with the application, as the memory store does."""

    def __init__(self, load: Callable[[], str | None], save: Callable[[str], None],
                 max_records: int = DEFAULT_MAX_RECORDS) -> None:
        super().__init__(max_records)
        self._save = save
        self._changed = False
        text = load()
        kept = json.loads(text) if text else {}
        for app, scope, key, value in kept.get("values", ()):
            self._values[(app, scope, key)] = value
        for app, scope, kind, rows in kept.get("records", ()):
            self._records[(app, scope, kind)] = deque(rows, maxlen=self.max_records)

    def put(self, app: str, scope: str, key: str, value: Any) -> None:
        super().put(app, scope, key, value)
        self._changed = True

    def append(self, app: str, scope: str, kind: str, record: dict[str, Any]) -> None:
        super().append(app, scope, kind, record)
        self._changed = True

    def commit(self) -> None:
        with self._lock:
            if not self._changed:
                return
            text = json.dumps({
                "values": [[*where, value] for where, value in self._values.items()],
                "records": [[*where, list(rows)] for where, rows in self._records.items()],
            }, separators=(",", ":"))
            self._changed = False
        try:
            self._save(text)
        except Exception:
            self._changed = True  # written at the next commit
            raise


class _Unusable(Exception):
    """The path cannot hold a SQLite store, and moving it aside would not help."""


class _Corrupt(Exception):
    """The file is not a usable SQLite database: moving it aside and starting fresh helps."""


def _is_busy(err: BaseException) -> bool:
    name = getattr(err, "sqlite_errorname", "")  # Python >= 3.11
    if name:
        return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
    text = str(err).lower()
    return "locked" in text or "busy" in text


def _is_corruption(err: BaseException) -> bool:
    if isinstance(err, _Corrupt):
        return True
    if not isinstance(err, sqlite3.DatabaseError):
        return False
    name = getattr(err, "sqlite_errorname", "")  # Python >= 3.11
    if name:
        return name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT"))
    text = str(err).lower()
    return "not a database" in text or "malformed" in text


class SqliteStateStore(StateStore):
    """State in a SQLite file (standard-library ``sqlite3``), surviving driver restarts.

    Several applications (processes) may share one file: WAL mode lets readers proceed while one
    writer commits, every write is its own ``BEGIN IMMEDIATE`` transaction, and ``busy_timeout``
    makes a writer wait for another instead of failing. One connection per store, guarded by a lock
    (the control-loop thread and API callers share it).

    A file that cannot be used is never fatal: a corrupt one is moved aside to
    ``<path>.corrupt-<timestamp>`` and a fresh store is created; if that fails too, or the path
    cannot hold a database at all (a directory, no permission), the store keeps its state in memory.
    The same happens if SQLite fails later, mid-run. Either way :attr:`fell_back` says why and
    ``on_fallback`` (if given) is called with that text.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_records: int = DEFAULT_MAX_RECORDS,
                 busy_timeout_s: float = 10.0,
                 on_fallback: Callable[[str], None] | None = None) -> None:
        if max_records < 1:
            raise ValueError("max_records must be >= 1")
        self.path = os.fspath(path)
        if not self.path:
            raise ValueError("SqliteStateStore needs a file path")
        self.max_records = max_records
        self.busy_timeout_s = busy_timeout_s
        self.on_fallback = on_fallback
        self.fell_back = None
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._memory: InMemoryStateStore | None = None  # set once we gave up on the file
        self._closed = False
        self._open()

    # -- opening and recovery ----------------------------------------------------------------

    def _open(self) -> None:
        try:
            self._conn = self._connect()
            return
        except (sqlite3.Error, OSError, _Unusable, _Corrupt) as err:
            first_error = err
        if not isinstance(first_error, (sqlite3.Error, _Corrupt)):
            self._use_memory(f"state store {self.path} cannot be used ({_describe(first_error)})")
            return
        # Retry under the inter-process lock: the failure may come from another application
        # replacing a corrupt file at this very moment (its stale -wal/-shm give "disk I/O error").
        try:
            moved = self._recover()
        except (sqlite3.Error, OSError, _Unusable, _Corrupt) as err:
            if _is_corruption(first_error) or _is_corruption(err):
                why = (f"state store {self.path} is unusable ({_describe(first_error)}) and could not "
                       f"be replaced ({_describe(err)})")
            else:
                why = f"state store {self.path} cannot be used ({_describe(err)})"
            self._use_memory(why)
            return
        if moved is not None:
            self._report(f"state store {self.path} was unusable ({_describe(first_error)}); moved "
                         f"it aside to {moved} and started a fresh store")
        elif _is_corruption(first_error):
            self._report(f"state store {self.path} was unusable ({_describe(first_error)}); "
                         "another application replaced it with a fresh store")
        else:  # a transient failure that the retry cleared: nothing was lost
            log.info("state store %s opened on retry after: %s", self.path,
                     _describe(first_error))

    def _connect(self) -> sqlite3.Connection:
        """Open and set up the file, retrying while other processes hold it (for up to the busy
        timeout): while a new file switches to WAL, SQLite reports "database is locked" at once
        instead of calling the busy handler, so busy_timeout alone does not cover opening."""
        deadline = time.monotonic() + self.busy_timeout_s
        while True:
            try:
                return self._connect_once()
            except sqlite3.OperationalError as err:
                if not _is_busy(err) or time.monotonic() >= deadline:
                    raise
            time.sleep(random.uniform(0.01, 0.1))

    def _connect_once(self) -> sqlite3.Connection:
        if os.path.isdir(self.path):
            raise _Unusable("it is a directory")
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        # Decisions and query names can be sensitive: a new file is the owner's alone (SQLite gives
        # its -wal and -shm files the database file's permissions).
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))
        # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so a writer takes the write lock
        # up front and waits (busy_timeout) instead of failing on a read->write upgrade.
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":  # e.g. a file system without shared memory
                log.warning("state store %s runs in journal mode %s, not WAL", self.path, mode)
            conn.execute("PRAGMA synchronous = NORMAL")  # durable enough with WAL, much faster
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise _Corrupt(f"integrity check failed: {check}")
            with _transaction(conn):
                conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
                conn.execute("CREATE TABLE IF NOT EXISTS kv (app TEXT NOT NULL, scope TEXT NOT NULL, "
                             "key TEXT NOT NULL, value TEXT NOT NULL, updated REAL NOT NULL, "
                             "PRIMARY KEY (app, scope, key))")
                conn.execute("CREATE TABLE IF NOT EXISTS records (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                             "app TEXT NOT NULL, scope TEXT NOT NULL, kind TEXT NOT NULL, "
                             "created REAL NOT NULL, record TEXT NOT NULL)")
                conn.execute("CREATE INDEX IF NOT EXISTS records_by_key ON records (app, scope, kind, id)")
                version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
                if version is None:
                    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
                elif version > SCHEMA_VERSION:
                    # Written by a newer sparkscale that other applications may still use: neither
                    # touch nor move it.
                    raise _Unusable(f"schema version {version} is newer than this sparkscale's "
                                    f"({SCHEMA_VERSION})")
        except BaseException:
            conn.close()
            raise
        return conn

    def _recover(self) -> str | None:
        """Move the corrupt file (and its -wal/-shm) aside and open a fresh one.

        Returns where it was moved, or None if the file opens fine now (another process replaced it,
        or the first failure was transient); raises if it fails for another reason. A lock file
        serialises this between processes so that one of them cannot move aside the fresh file the
        other just created.
        """
        with _file_lock(self.path + ".lock"):
            try:  # re-check under the lock: someone may have fixed it meanwhile
                self._conn = self._connect()
                return None
            except (sqlite3.Error, _Corrupt) as err:
                if not _is_corruption(err):
                    raise
            stamp = time.strftime("%Y%m%dT%H%M%S")
            target = f"{self.path}.corrupt-{stamp}"
            n = 1
            while os.path.exists(target):
                n += 1
                target = f"{self.path}.corrupt-{stamp}-{n}"
            # Side files first: a stale WAL next to the new file would be replayed into it, and once
            # the main file is gone another process may create a fresh database (and side files of
            # its own) at the path at any moment, which must not be moved.
            for suffix in ("-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(self.path + suffix, target + suffix)
            os.replace(self.path, target)
            self._conn = self._connect()
            return target

    def _use_memory(self, why: str) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None
        self._memory = InMemoryStateStore(self.max_records)
        self._report(f"{why}; keeping state in memory (it will not survive a restart)")

    def _report(self, why: str) -> None:
        report_fallback(self, why, self.on_fallback)

    # -- operations --------------------------------------------------------------------------

    def _run(self, op: Callable[[sqlite3.Connection], Any], fallback: Callable[[StateStore], Any]) -> Any:
        with self._lock:
            if self._closed:
                raise RuntimeError("state store is closed")
            if self._memory is None and self._conn is not None:
                try:
                    return op(self._conn)
                except sqlite3.Error as err:
                    # Mid-run failure (disk full, file removed or damaged, lock held too long):
                    # keep the control loop going rather than raising into it.
                    self._use_memory(f"state store {self.path} failed: {_describe(err)}")
            assert self._memory is not None
            return fallback(self._memory)

    def get(self, app: str, scope: str, key: str) -> Any | None:
        def op(conn: sqlite3.Connection) -> Any | None:
            row = conn.execute("SELECT value FROM kv WHERE app = ? AND scope = ? AND key = ?",
                               (app, scope, key)).fetchone()
            return None if row is None else json.loads(row[0])
        return self._run(op, lambda m: m.get(app, scope, key))

    def put(self, app: str, scope: str, key: str, value: Any) -> None:
        text = encode_json(value, "values")

        def op(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute("INSERT INTO kv (app, scope, key, value, updated) VALUES (?, ?, ?, ?, ?) "
                             "ON CONFLICT (app, scope, key) DO UPDATE SET value = excluded.value, "
                             "updated = excluded.updated", (app, scope, key, text, time.time()))
        self._run(op, lambda m: m.put(app, scope, key, value))

    def append(self, app: str, scope: str, kind: str, record: dict[str, Any]) -> None:
        check_record(record)
        text = encode_json(record, "records")

        def op(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute("INSERT INTO records (app, scope, kind, created, record) "
                             "VALUES (?, ?, ?, ?, ?)", (app, scope, kind, time.time(), text))
                # Keep the newest max_records rows per (app, scope, kind): a long-running driver
                # must not grow the file without bound.
                conn.execute("DELETE FROM records WHERE app = ? AND scope = ? AND kind = ? AND id < "
                             "(SELECT id FROM records WHERE app = ? AND scope = ? AND kind = ? "
                             "ORDER BY id DESC LIMIT 1 OFFSET ?)",
                             (app, scope, kind, app, scope, kind, self.max_records - 1))
        self._run(op, lambda m: m.append(app, scope, kind, record))

    def records(self, app: str, scope: str, kind: str, limit: int = 100) -> list[dict[str, Any]]:
        if limit <= 0:
            return []

        def op(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute("SELECT record FROM (SELECT id, record FROM records WHERE app = ? AND "
                                "scope = ? AND kind = ? ORDER BY id DESC LIMIT ?) ORDER BY id",
                                (app, scope, kind, limit)).fetchall()
            return [json.loads(row[0]) for row in rows]
        return self._run(op, lambda m: m.records(app, scope, kind, limit))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error as err:
                    log.warning("closing state store %s failed: %s", self.path, err)
                self._conn = None
            if self._memory is not None:
                self._memory.close()


@contextlib.contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


@contextlib.contextmanager
def _file_lock(path: str) -> Iterator[None]:
    """An exclusive advisory lock between processes; best effort (no lock if it cannot be made)."""
    if fcntl is None:
        yield
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _describe(err: BaseException) -> str:
    if isinstance(err, (_Unusable, _Corrupt)):
        return str(err)
    return f"{type(err).__name__}: {err}"
