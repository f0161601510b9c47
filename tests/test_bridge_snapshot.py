"""Python's side of the bridge snapshot's contract: the typed records of
:mod:`sparkscale_listener.spark.bridge` against the declaration the JVM is tested against too
(``jvm-bridge/src/main/resources/io/sparkscale/bridge/snapshot-schema.json``; the JVM's side is
``SnapshotContractTest``), and the parsing of the JVM's JSON into them.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sparkscale_listener.spark.bridge import (
    SNAPSHOT_SCHEMA,
    BatchTasks,
    BridgeSnapshot,
    ExecutorSnapshot,
    ListenerTotals,
    QuerySnapshot,
    json_name,
    record_fields,
)

RESOURCES = Path(__file__).resolve().parents[1] / "jvm-bridge" / "src" / "main" / "resources"
SCHEMA_FILE = RESOURCES / SNAPSHOT_SCHEMA
RECORDS = {r.__name__: r
           for r in (BridgeSnapshot, ExecutorSnapshot, ListenerTotals, QuerySnapshot, BatchTasks)}
SCALARS: dict[str, type] = {"integer": int, "number": float, "string": str}


def declared() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def python_type(declared_type: str) -> Any:
    """The annotation a record attribute of this declared type must have."""
    nullable = declared_type.endswith("?")
    base = declared_type.rstrip("?")
    if base.startswith("map of "):
        kind: Any = Mapping[str, RECORDS[base.removeprefix("map of ")]]  # type: ignore[valid-type]
    else:
        kind = SCALARS.get(base) or RECORDS[base]
    return kind | None if nullable else kind


def test_one_record_per_declared_object_and_the_root_is_the_snapshot() -> None:
    schema = declared()
    assert set(schema["objects"]) == set(RECORDS)
    assert RECORDS[schema["root"]] is BridgeSnapshot


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_each_record_has_exactly_the_declared_fields_with_their_types(name: str) -> None:
    fields = declared()["objects"][name]
    have = record_fields(RECORDS[name])
    assert list(have) == list(fields), "the record's attributes, in the declaration's order"
    for field_name, spec in fields.items():
        assert have[field_name] == python_type(spec["type"]), field_name


def test_attribute_names_are_the_json_names_in_snake_case() -> None:
    assert json_name("busy_ms") == "busyMs"
    assert json_name("first_launch_ms") == "firstLaunchMs"
    assert json_name("app_id") == "appId"
    assert json_name("host") == "host"


def test_a_snapshot_parses_into_the_records() -> None:
    document = {
        "timeMs": 1_700_000_010_000, "appId": "app-7", "coresPerExecutor": 2,
        "executors": {
            "1": {"host": "h1", "cores": 2, "addedMs": 1_700_000_000_000, "removedMs": None,
                  "removedReason": None, "runningTasks": 1, "liveShuffleJobs": 1, "busyMs": 1500.5,
                  "tasksFinished": 3, "tasksFailed": 1, "gcMs": 12.0, "runMs": 1400.0,
                  "heapUsedBytes": 512, "heapMaxBytes": 1024},
            "2": {"host": "h2", "cores": 2, "addedMs": 1_700_000_000_000, "removedMs": 1_700_000_005_000,
                  "removedReason": "lost worker"},
        },
        "totals": {"slotMs": 30_000.0, "busyMs": 1500.5, "tasksFinished": 3, "tasksFailed": 1,
                   "tasksKilled": 2, "tasksAgedOut": 1, "gcMs": 12.0, "runMs": 1400.0,
                   "executorsAdded": 2, "executorsRemoved": 1},
        "queries": {"q-1": {"busyMs": 900.0, "tasksFinished": 3, "tasksFailed": 0, "runMs": 800.0,
                            "jobsFailed": 1, "maxStageTasks": 4,
                            "batches": {"7": {"busyMs": 600.0, "tasks": 3, "executors": 2,
                                              "firstLaunchMs": 1_700_000_001_000,
                                              "lastEndMs": 1_700_000_001_400, "stages": 2},
                                        "8": {"busyMs": 0.0, "tasks": 0, "executors": 0,
                                              "firstLaunchMs": None, "lastEndMs": None, "stages": 1}}}},
    }
    snap = BridgeSnapshot.from_json(document)
    assert (snap.time_ms, snap.app_id, snap.cores_per_executor) == (1_700_000_010_000, "app-7", 2)
    assert snap.executors["1"] == ExecutorSnapshot(
        host="h1", cores=2, added_ms=1_700_000_000_000, removed_ms=None, removed_reason=None, running_tasks=1,
        live_shuffle_jobs=1, busy_ms=1500.5, tasks_finished=3, tasks_failed=1, gc_ms=12.0, run_ms=1400.0,
        heap_used_bytes=512, heap_max_bytes=1024)
    removed = snap.executors["2"]
    assert not removed.live
    assert (removed.removed_ms, removed.removed_reason) == (1_700_000_005_000, "lost worker")
    assert removed.heap_used_bytes == -1  # absent: the record's default
    assert snap.totals == ListenerTotals(30_000.0, 1500.5, 3, 1, 2, 1, 12.0, 1400.0, 2, 1)
    q = snap.queries["q-1"]
    assert (q.busy_ms, q.jobs_failed, q.max_stage_tasks) == (900.0, 1, 4)
    assert q.batches == {"7": BatchTasks(600.0, 3, 2, 1_700_000_001_000, 1_700_000_001_400, 2),
                         "8": BatchTasks(0.0, 0, 0, None, None, 1)}
    assert isinstance(snap.totals.slot_ms, float) and isinstance(snap.time_ms, int)


def test_no_snapshot_and_stray_values_give_defaults_never_an_error() -> None:
    assert BridgeSnapshot.from_json({}) == BridgeSnapshot()
    assert BridgeSnapshot().time_ms == 0 and BridgeSnapshot().executors == {}
    odd = BridgeSnapshot.from_json({"timeMs": "soon", "coresPerExecutor": 2.0, "unknown": [1],
                                    "executors": {"1": "not an object", "2": {"busyMs": "NaN"}},
                                    "queries": []})
    assert odd.time_ms == 0 and odd.cores_per_executor == 2
    assert list(odd.executors) == ["2"] and odd.executors["2"].busy_ms == 0.0
    assert odd.queries == {}


def test_the_records_are_frozen() -> None:
    snap = BridgeSnapshot.from_json({"timeMs": 5})
    with pytest.raises(AttributeError):
        snap.time_ms = 6  # type: ignore[misc]
    assert typing.get_type_hints(BridgeSnapshot)["executors"] == Mapping[str, ExecutorSnapshot]
