"""Python's side of the bridge snapshot's contract: the typed records of
:mod:`sparkscale_listener.collect.snapshot` against the declaration the JVM is tested against too
(``jvm-bridge/src/main/resources/io/sparkscale/bridge/snapshot-schema.json``; the JVM's side is
``SnapshotContractTest``), and the parsing of the JVM's JSON into them.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sparkscale_listener.collect.snapshot import (
    SNAPSHOT_SCHEMA,
    BatchTasks,
    BridgeSnapshot,
    ExecutorSnapshot,
    ListenerTotals,
    QuerySnapshot,
    RecentBatches,
    SourceOffsets,
    json_name,
    record_fields,
    with_tables_by_id,
)
from sparkscale_listener.spark.bridge import JvmBridge

RESOURCES = Path(__file__).resolve().parents[3] / "jvm-bridge" / "src" / "main" / "resources"
SCHEMA_FILE = RESOURCES / SNAPSHOT_SCHEMA
RECORDS = {r.__name__: r for r in (BridgeSnapshot, ExecutorSnapshot, ListenerTotals, QuerySnapshot,
                                   BatchTasks, SourceOffsets)}
SCALARS: dict[str, type] = {"integer": int, "number": float, "string": str}


def declared() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def python_type(declared_type: str) -> Any:
    """The annotation a record attribute of this declared type must have."""
    nullable = declared_type.endswith("?")
    base = declared_type.rstrip("?")
    if base.startswith(("map of ", "table of ")):
        kind: Any = Mapping[str, RECORDS[base.split(" of ")[1]]]  # type: ignore[valid-type]
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
        # A row each: the id, then the fields in the declared order (a short row: the rest defaults).
        "executors": [
            ["1", "h1", 2, 1_700_000_000_000, None, None, 1, 1, 1500.5, 3, 1, 12.0, 1400.0, 512, 1024],
            ["2", "h2", 2, 1_700_000_000_000, 1_700_000_005_000, "lost worker"],
        ],
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
        "sourceOffsets": {"q-1": {"timeMs": 1_700_000_009_500, "offsets": 123_456.0, "partitions": 8}},
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
    assert snap.source_offsets == {"q-1": SourceOffsets(1_700_000_009_500, 123_456.0, 8)}
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


def test_a_table_row_is_the_id_then_the_declared_fields_in_order() -> None:
    names = list(declared()["objects"]["ExecutorSnapshot"])
    values = ["h", 4, 10, None, None, 2, 0, 5.5, 6, 1, 0.5, 4.0, 100, 200]
    assert len(values) == len(names)
    as_row = BridgeSnapshot.from_json({"executors": [["3", *values], "not a row", []]}).executors
    by_name = dict(zip(names, values, strict=True))
    as_object = BridgeSnapshot.from_json({"executors": {"3": by_name}}).executors
    assert as_row == as_object and as_row["3"].cores == 4 and as_row["3"].gc_ms == 0.5
    # How tests read one field of one executor of the JVM's JSON.
    assert with_tables_by_id({"executors": [["3", *values]], "timeMs": 1}) == {
        "executors": {"3": by_name}, "timeMs": 1}


@pytest.mark.parametrize("values", [
    ["h", 4, 10, None, None, 2, 0, 5.5, 6, 1, 0.5, 4.0, 100, 200],  # a live executor
    ["h", 4, 10, 20, "Executor killed by driver.", 0, 0, 5.5, 6, 1, 0.5, 4.0, -1, -1],  # a removed one
    ["h", 4, 10, None, None, 2, 0, float("nan"), 6, 1, float("inf"), 4.0, 100, 200],  # not finite
    ["h", 4, 10, None, None, 2, 0, 5, 6, 1, 0, 4.0, 100, 200],  # whole numbers for floats
    ["h", True, 10, None, None, 2, 0, 5.5, 6, 1, 0.5, 4.0, 100, 200],  # a boolean for a count
    [None, None, 10, None, None, 2, 0, 5.5, 6, 1, 0.5, 4.0, 100, 200],  # nulls for non-null defaults
    ["h", "4", 10, None, None, 2, 0, "5.5", 6, 1, 0.5, 4.0, 100, 200],  # numbers as strings
    ["h", 4, 10],  # a short row (an older bridge)
    ["h", 4, 10, None, None, 2, 0, 5.5, 6, 1, 0.5, 4.0, 100, 200, "a newer column"],
])
def test_a_row_of_any_shape_reads_as_its_object_does(values: list[Any]) -> None:
    # Rows whose every value already has its field's type go to the record as they are (a
    # thousand a poll); every other shape is converted value by value, as an object's fields are.
    names = list(declared()["objects"]["ExecutorSnapshot"])
    for _ in range(2):  # the shape unseen, then known
        as_row = BridgeSnapshot.from_json({"executors": [["3", *values]]}).executors
        by_name = {n: v for n, v in zip(names, values, strict=False) if v is not None}
        as_object = BridgeSnapshot.from_json({"executors": {"3": by_name}}).executors
        assert as_row == as_object, values
        typed = [(v, type(v)) for v in dataclasses.astuple(as_row["3"])]
        assert typed == [(v, type(v)) for v in dataclasses.astuple(as_object["3"])], values


def test_the_records_are_frozen() -> None:
    snap = BridgeSnapshot.from_json({"timeMs": 5})
    with pytest.raises(AttributeError):
        snap.time_ms = 6  # type: ignore[misc]
    assert typing.get_type_hints(BridgeSnapshot)["executors"] == Mapping[str, ExecutorSnapshot]


# --- polls that carry only the changed batches -----------------------------------------------------------

def batch(tasks: int) -> dict[str, Any]:
    return {"busyMs": 10.0 * tasks, "tasks": tasks, "executors": 1, "stages": 1}


def document(batches: dict[str, dict[str, dict[str, Any]]], since: int, changes: int, listener: str = "L1",
             per_query: int = 3) -> dict[str, Any]:
    """A snapshot as the listener sends it, with the given batches per query."""
    return {"timeMs": 1_700_000_000_000 + changes, "appId": "app", "listenerId": listener, "changes": changes,
            "batchesSince": since, "batchesPerQuery": per_query,
            "queries": {q: {"tasksFinished": 1, "batches": b} for q, b in batches.items()}}


def tasks_by_batch(snapshot: BridgeSnapshot) -> dict[str, dict[str, int]]:
    return {q: {b: t.tasks for b, t in query.batches.items()} for q, query in snapshot.queries.items()}


def test_changed_batches_are_put_with_those_kept_as_the_listener_keeps_them() -> None:
    kept = RecentBatches()
    assert kept.since == -1  # the first poll asks for everything
    first = {"q1": {"1": batch(1), "2": batch(2)}, "q2": {"9": batch(9)}}
    whole = BridgeSnapshot.from_json(document(first, -1, 5))
    assert kept.continues(whole)
    assert tasks_by_batch(kept.merge(whole)) == {"q1": {"1": 1, "2": 2}, "q2": {"9": 9}}
    assert kept.since == 5

    # Batch 2 changed, 3 and 4 are new: 3 per query kept, the oldest (1) goes, as in the listener. q2 has
    # nothing new; q3 is new.
    delta = BridgeSnapshot.from_json(document({"q1": {"2": batch(20), "3": batch(3), "4": batch(4)}, "q2": {},
                                               "q3": {"1": batch(1)}}, 5, 9))
    assert kept.continues(delta)
    merged = kept.merge(delta)
    assert tasks_by_batch(merged) == {"q1": {"2": 20, "3": 3, "4": 4}, "q2": {"9": 9}, "q3": {"1": 1}}
    assert list(merged.queries["q1"].batches) == ["2", "3", "4"]  # the listener's order: oldest first
    assert merged.queries["q1"].tasks_finished == 1  # the rest of the query as the listener sent it
    assert kept.since == 9
    # A query the listener no longer tracks is forgotten; a snapshot handed out earlier stays as it was.
    later = kept.merge(BridgeSnapshot.from_json(document({"q1": {"5": batch(5)}}, 9, 10)))
    assert tasks_by_batch(later) == {"q1": {"3": 3, "4": 4, "5": 5}}
    assert tasks_by_batch(merged)["q1"] == {"2": 20, "3": 3, "4": 4}


def test_another_listeners_changes_or_no_plugin_start_over() -> None:
    kept = RecentBatches()
    kept.merge(BridgeSnapshot.from_json(document({"q1": {"1": batch(1)}}, -1, 5)))
    assert not kept.continues(BridgeSnapshot.from_json(document({}, 5, 7, listener="L2")))
    assert kept.merge(BridgeSnapshot()) == BridgeSnapshot()  # the plugin stopped
    assert kept.since == -1


class _Listener:
    """The bridge class as py4j shows it, serving whole snapshots or the changes since a count."""

    def __init__(self) -> None:
        self.listener, self.batches, self.changed = "L1", {"1": batch(1)}, {"1": 1}
        self.changes, self.asked = 1, []

    def snapshotJson(self, since: int = -1) -> str:  # the Java method's name
        self.asked.append(since)
        shown = {b: v for b, v in self.batches.items() if self.changed[b] > since}
        return json.dumps(document({"q1": shown}, since, self.changes, listener=self.listener, per_query=64))


def test_poll_asks_for_the_changes_since_its_previous_poll_and_for_everything_from_a_new_listener() -> None:
    jvm = _Listener()
    bridge = JvmBridge.__new__(JvmBridge)
    bridge._cls, bridge._batches, bridge._poll_lock = jvm, RecentBatches(), threading.Lock()
    bridge._replies_without_delay = True  # no gateway to speed up here
    assert tasks_by_batch(bridge.poll()) == {"q1": {"1": 1}}
    jvm.batches["2"], jvm.changed["2"], jvm.changes = batch(2), 2, 2
    assert tasks_by_batch(bridge.poll()) == {"q1": {"1": 1, "2": 2}}
    # A new SparkContext: its listener counts from 1 again and has other batches.
    jvm.listener, jvm.batches, jvm.changed, jvm.changes = "L2", {"7": batch(7)}, {"7": 1}, 1
    assert tasks_by_batch(bridge.poll()) == {"q1": {"7": 7}}
    assert jvm.asked == [-1, 1, 2, -1]


def test_a_jvm_py4j_cannot_reach_is_a_stopped_context_and_other_failures_raise() -> None:
    from py4j.protocol import Py4JNetworkError

    class Context:
        def __init__(self, failure: Exception | None) -> None:
            self.failure = failure

        def sc(self) -> Any:
            if self.failure is not None:
                raise self.failure
            return type("Sc", (), {"isStopped": lambda self: False})()

    bridge = JvmBridge.__new__(JvmBridge)
    bridge._sc = type("SparkContext", (), {})()
    bridge._sc._jsc = Context(None)
    assert bridge.context_stopped() is False
    bridge._sc._jsc = None  # SparkContext.stop() sets it so
    assert bridge.context_stopped() is True
    bridge._sc._jsc = Context(Py4JNetworkError("An error occurred while trying to connect to Java"))
    assert bridge.context_stopped() is True
    bridge._sc._jsc = Context(AttributeError("a bug of ours"))
    with pytest.raises(AttributeError):
        bridge.context_stopped()
