"""State stores: in-memory and SQLite (the store contract, persistence, sharing a file between
processes, recovery), choosing the store, and the control loop's typed view of it."""

from __future__ import annotations

import logging
import multiprocessing
import os
import sqlite3
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_contract import StateStoreContract

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.options import ConfigError
from sparkscale_listener.state.autoscaler_state import AutoscalerState
from sparkscale_listener.state.loading import build_state_store
from sparkscale_listener.state.store import (
    APP_SCOPE,
    InMemoryStateStore,
    KeptElsewhereStateStore,
    SqliteStateStore,
    StateStore,
)


class Elsewhere:
    """Where a :class:`KeptElsewhereStateStore` keeps its state (the driver's heap, for the agent)."""

    def __init__(self) -> None:
        self.text: str | None = None
        self.saves = 0

    def load(self) -> str | None:
        return self.text

    def save(self, text: str) -> None:
        self.text = text
        self.saves += 1


class TestLocalStores(StateStoreContract):
    @pytest.fixture(params=["memory", "sqlite", "kept elsewhere"])
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
        heap = Elsewhere()
        s: StateStore = {
            "memory": lambda: InMemoryStateStore(max_records=5),
            "sqlite": lambda: SqliteStateStore(tmp_path / "state.db", max_records=5),
            "kept elsewhere": lambda: KeptElsewhereStateStore(heap.load, heap.save, max_records=5),
        }[request.param]()
        yield s
        s.close()


def test_a_restarted_agent_takes_over_what_its_memory_store_kept_in_the_drivers_heap() -> None:
    heap = Elsewhere()
    first = KeptElsewhereStateStore(heap.load, heap.save, max_records=3)
    first.put("app", APP_SCOPE, "guard", {"healthy_target": 3})
    for n in range(5):
        first.append("app", APP_SCOPE, "scaling", {"n": n})
    first.commit()
    first.commit()  # nothing changed since: nothing saved
    assert heap.saves == 1
    # The agent is killed; the one started after it finds what the first kept.
    second = KeptElsewhereStateStore(heap.load, heap.save, max_records=3)
    assert second.get("app", APP_SCOPE, "guard") == {"healthy_target": 3}
    assert second.records("app", APP_SCOPE, "scaling") == [{"n": 2}, {"n": 3}, {"n": 4}]
    second.append("app", APP_SCOPE, "scaling", {"n": 5})
    assert second.records("app", APP_SCOPE, "scaling") == [{"n": 3}, {"n": 4}, {"n": 5}]


def test_a_failed_save_is_tried_again_at_the_next_commit() -> None:
    heap = Elsewhere()
    attempts: list[str] = []

    def save(text: str) -> None:
        attempts.append(text)
        if len(attempts) == 1:
            raise ConnectionError("the gateway is gone")
        heap.save(text)

    store = KeptElsewhereStateStore(heap.load, save)
    store.put("app", APP_SCOPE, "k", 1)
    with pytest.raises(ConnectionError):
        store.commit()
    store.commit()
    assert heap.saves == 1 and KeptElsewhereStateStore(heap.load, heap.save).get("app", APP_SCOPE, "k") == 1


def test_the_memory_store_of_an_agent_is_kept_where_the_agent_says() -> None:
    heap = Elsewhere()
    store = build_state_store(AutoscalerConfig(), memory_kept_by=(heap.load, heap.save))
    assert isinstance(store, KeptElsewhereStateStore)


def test_sqlite_persists_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "state.db"  # parent directories are created
    first = SqliteStateStore(path)
    first.put("app", APP_SCOPE, "target", 7)
    first.append("app", APP_SCOPE, "provisioning", {"seconds": 5.5})
    first.close()
    second = SqliteStateStore(path)
    assert second.fell_back is None
    assert second.get("app", APP_SCOPE, "target") == 7
    assert second.records("app", APP_SCOPE, "provisioning") == [{"seconds": 5.5}]
    assert second._conn is not None
    assert second._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert second._conn.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
    second.close()


ROWS_PER_PROCESS = 150


def _writer(path: str, app: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()  # open and write at the same moment
    s = SqliteStateStore(path, max_records=10_000)
    assert s.fell_back is None, s.fell_back
    for i in range(ROWS_PER_PROCESS):
        s.put(app, APP_SCOPE, f"k{i}", {"app": app, "i": i})
        s.append(app, APP_SCOPE, "scaling", {"i": i})
        s.append("shared", APP_SCOPE, "scaling", {"app": app, "i": i})  # same rows, interleaved
    s.close()


def test_sqlite_shared_by_several_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    ctx = multiprocessing.get_context("spawn")  # not fork: see the corrupt-file test below
    apps = [f"app{n}" for n in range(3)]
    barrier = ctx.Barrier(len(apps))
    procs = [ctx.Process(target=_writer, args=(path, app, barrier)) for app in apps]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    s = SqliteStateStore(path, max_records=10_000)
    for app in apps:
        for i in range(ROWS_PER_PROCESS):
            assert s.get(app, APP_SCOPE, f"k{i}") == {"app": app, "i": i}
        rows = s.records(app, APP_SCOPE, "scaling", limit=10_000)
        assert rows == [{"i": i} for i in range(ROWS_PER_PROCESS)]
    shared = s.records("shared", APP_SCOPE, "scaling", limit=10_000)
    assert len(shared) == len(apps) * ROWS_PER_PROCESS
    for app in apps:  # each writer's rows are all there, in its own order
        assert [r["i"] for r in shared if r["app"] == app] == list(range(ROWS_PER_PROCESS))
    s.close()


def test_corrupt_file_moved_aside_and_fresh_store(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "state.db"
    garbage = b"this is not a database " * 200
    path.write_bytes(garbage)
    reports: list[str] = []
    with caplog.at_level(logging.WARNING, logger="sparkscale"):
        s = SqliteStateStore(path, on_fallback=reports.append)
    assert s.fell_back is not None and "moved it aside" in s.fell_back
    assert reports == [s.fell_back]
    assert str(path) in caplog.text and "not a database" in caplog.text
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("state.db.corrupt-")]
    assert len(aside) == 1 and aside[0].read_bytes() == garbage
    s.put("app", APP_SCOPE, "k", 1)  # a real, fresh SQLite store
    s.close()
    reopened = SqliteStateStore(path)
    assert reopened.fell_back is None and reopened.get("app", APP_SCOPE, "k") == 1
    reopened.close()


def _open_corrupt(path: str, app: str, barrier: multiprocessing.synchronize.Barrier) -> None:
    barrier.wait()
    s = SqliteStateStore(path)
    assert s._memory is None, s.fell_back  # recovered to a real file, not memory
    s.put(app, APP_SCOPE, "k", app)
    s.close()


def test_several_processes_recover_one_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(b"garbage" * 1000)
    # spawn, not fork: a fork of the pytest process copies locks that its other threads (the control
    # loops of earlier tests) may hold at that instant, and a child can then wait on one forever.
    ctx = multiprocessing.get_context("spawn")
    apps = [f"app{n}" for n in range(3)]
    barrier = ctx.Barrier(len(apps))
    procs = [ctx.Process(target=_open_corrupt, args=(str(path), app, barrier)) for app in apps]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    # Exactly one of them moved the bad file aside; none moved aside another's fresh file.
    aside = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("state.db.corrupt-")
                   and not p.name.endswith(("-wal", "-shm", "-journal")))
    assert len(aside) == 1, aside
    s = SqliteStateStore(path)
    assert [s.get(app, APP_SCOPE, "k") for app in apps] == apps
    s.close()


def test_directory_path_falls_back_to_memory(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sparkscale"):
        s = SqliteStateStore(tmp_path)
    assert s.fell_back is not None and "directory" in s.fell_back and "memory" in s.fell_back
    assert str(tmp_path) in caplog.text
    assert tmp_path.is_dir()  # never moved aside: it is not ours
    s.put("app", APP_SCOPE, "k", 3)
    assert s.get("app", APP_SCOPE, "k") == 3
    s.close()


def test_sqlite_files_are_the_owners_alone(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    s = SqliteStateStore(path)
    s.put("app", APP_SCOPE, "k", 1)
    made = [p for p in tmp_path.iterdir() if p.name.startswith("state.db")]
    assert {p.name for p in made} >= {"state.db", "state.db-wal"}
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in made), {p.name: oct(p.stat().st_mode) for p in made}
    s.close()


def test_parent_is_a_file_falls_back_to_memory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    s = SqliteStateStore(tmp_path / "file" / "state.db")
    assert s.fell_back is not None and "memory" in s.fell_back
    s.append("app", APP_SCOPE, "scaling", {"i": 1})
    assert s.records("app", APP_SCOPE, "scaling") == [{"i": 1}]


def test_unopenable_file_falls_back_to_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Stands in for "no permission" (tests may run as root, where chmod does not deny).
    def refuse(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(sqlite3, "connect", refuse)
    s = SqliteStateStore(tmp_path / "state.db")
    assert s.fell_back is not None and "unable to open database file" in s.fell_back
    assert not [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]  # not corrupt: not moved
    s.put("app", APP_SCOPE, "k", 1)
    assert s.get("app", APP_SCOPE, "k") == 1


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores permissions")
def test_unreadable_file_falls_back_to_memory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    SqliteStateStore(locked / "state.db").close()
    locked.chmod(0o500)
    (locked / "state.db").chmod(0o000)
    try:
        s = SqliteStateStore(locked / "state.db")
        assert s.fell_back is not None and "memory" in s.fell_back
    finally:
        locked.chmod(0o700)


def test_newer_schema_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    SqliteStateStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    conn.close()
    s = SqliteStateStore(path)
    assert s.fell_back is not None and "schema version 99" in s.fell_back
    assert not [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]


def test_failure_mid_run_degrades_to_memory(tmp_path: Path) -> None:
    reports: list[str] = []
    s = SqliteStateStore(tmp_path / "state.db", on_fallback=reports.append)
    s.put("app", APP_SCOPE, "k", 1)
    assert s._conn is not None
    s._conn.close()  # any sqlite3.Error from now on
    s.put("app", APP_SCOPE, "k", 2)  # does not raise into the control loop
    assert s.get("app", APP_SCOPE, "k") == 2
    assert s.fell_back is not None and "memory" in s.fell_back and reports == [s.fell_back]
    s.close()


# -- build_state_store ----------------------------------------------------------------------------

def test_build_memory_default() -> None:
    s = build_state_store(AutoscalerConfig.from_keys({}))
    assert isinstance(s, InMemoryStateStore)


def test_build_sqlite_with_max_records(tmp_path: Path) -> None:
    config = AutoscalerConfig.from_keys({"stateStore": "sqlite",
                                         "stateStore.sqlite.path": str(tmp_path / "s.db"),
                                         "stateStore.maxRecords": "2"})
    s = build_state_store(config)
    assert isinstance(s, SqliteStateStore) and s.max_records == 2 and s.fell_back is None
    s.close()


def test_build_rejects_unknown_store_key(tmp_path: Path) -> None:
    config = AutoscalerConfig.from_keys({"stateStore": "sqlite", "stateStore.sqlite.path": "x.db",
                                         "stateStore.pth": "typo.db"})
    with pytest.raises(ConfigError, match=r"sparkscale\.stateStore\.pth='typo\.db' is not a known key"):
        build_state_store(config)


def test_build_unknown_name() -> None:
    config = AutoscalerConfig.from_keys({"stateStore": "redis"})
    with pytest.raises(ConfigError) as err:
        build_state_store(config)
    message = str(err.value)
    assert "spark.sparkscale.stateStore='redis'" in message
    assert "memory, sqlite, kubernetes, or an importable Python class path" in message


def test_build_bad_class_path() -> None:
    config = AutoscalerConfig.from_keys({"stateStore": "no_such_pkg_s.Store"})
    with pytest.raises(ConfigError, match=r"spark\.sparkscale\.stateStore='no_such_pkg_s\.Store'"):
        build_state_store(config)


def test_build_custom_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sparkscale_test_custom_store.py").write_text(textwrap.dedent("""
        from sparkscale_listener.state.store import InMemoryStateStore

        class MyStore(InMemoryStateStore):
            def __init__(self, context):
                super().__init__()
                self.config = context.config
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = AutoscalerConfig.from_keys({"stateStore": "sparkscale_test_custom_store.MyStore"})
    s = build_state_store(config)
    assert type(s).__name__ == "MyStore" and s.config is config  # type: ignore[attr-defined]


# -- ownership: a restarted driver takes the state over, a concurrent run keeps its own ----------

def _state(store: StateStore, run_id: str) -> AutoscalerState:
    def fail(where: str, exc: BaseException) -> None:
        raise AssertionError(f"{where}: {exc}")
    return AutoscalerState(store, "orders-job", fail, run_id=run_id)


def test_a_restarted_driver_takes_the_state_over_once_the_old_heartbeat_is_stale() -> None:
    store = InMemoryStateStore()
    crashed = _state(store, "app-1")
    assert crashed.claim(100.0, stale_after_s=30.0) == "owned"
    crashed.store_rollback_state({"healthy_target": 6}, None)
    crashed.heartbeat(110.0)
    crashed.flush()  # the end of its tick; then the driver dies without releasing
    restarted = _state(store, "app-2")
    assert restarted.claim(115.0, 30.0) is None  # fresh heartbeat: wait and see
    assert restarted.claim(125.0, 30.0) is None
    assert restarted.claim(146.0, 30.0) == "owned"  # it never beat again: take over
    assert restarted.app == "orders-job" and restarted.rollback_guard() == {"healthy_target": 6}


def test_a_clean_stop_releases_the_state_at_once() -> None:
    store = InMemoryStateStore()
    first = _state(store, "app-1")
    first.claim(100.0, 30.0)
    first.flush()
    first.release()
    assert _state(store, "app-2").claim(101.0, 30.0) == "owned"


def test_a_concurrent_run_of_the_same_application_keeps_its_own_state() -> None:
    store = InMemoryStateStore()
    running = _state(store, "app-1")
    running.claim(100.0, 30.0)
    running.store_rollback_state({"healthy_target": 6}, None)
    running.flush()
    second = _state(store, "app-2")
    assert second.claim(105.0, 30.0) is None
    running.heartbeat(110.0)  # alive
    running.flush()
    assert second.claim(115.0, 30.0) == "separate"
    assert second.app != running.app and second.rollback_guard() is None
    second.store_rollback_state({"healthy_target": 2}, None)
    second.flush()
    assert running.rollback_guard() == {"healthy_target": 6}  # untouched
