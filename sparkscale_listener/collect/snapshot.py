"""The JVM listener's snapshot as the collector reads it: frozen records, their parsing, and the batches
kept between polls.

:meth:`~sparkscale_listener.spark.bridge.JvmBridge.poll` returns a :class:`BridgeSnapshot` of these records
(:class:`ExecutorSnapshot`, :class:`ListenerTotals`, :class:`QuerySnapshot`, :class:`BatchTasks`,
:class:`SourceOffsets`). Their objects, fields, types and meanings are declared once, in
``jvm-bridge/src/main/resources/io/sparkscale/bridge/snapshot-schema.json`` (packaged in every bridge
jar); a JUnit test holds the JVM's JSON to it and ``tests/unit/collect/test_bridge_snapshot.py`` these
records.
A record's attribute is the JSON field in snake case (``busyMs`` -> ``busy_ms``). The executors come as a
table, a row of values in the declared order each (the field names were most of a poll at 1,000
executors); a map of objects by id parses the same (the tests' fakes write that). A poll carries only
the batches that changed since the previous one; :class:`RecentBatches` keeps the others.

They live with the collection, not with the py4j wrapper that fetches them: the collector, the replay
and the tests read them without a JVM.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

# Where the snapshot's declaration is: in each bridge jar, and in the source tree under jvm-bridge/.
SNAPSHOT_SCHEMA = "io/sparkscale/bridge/snapshot-schema.json"


# --- the snapshot's records (declared in SNAPSHOT_SCHEMA; the defaults stand for absent fields) ---------

@dataclass(frozen=True, slots=True)
class ExecutorSnapshot:
    """One executor, live or removed."""

    host: str = ""
    cores: int = 1
    added_ms: int = 0
    removed_ms: int | None = None  # None while it lives
    removed_reason: str | None = None
    running_tasks: int = 0
    live_shuffle_jobs: int = 0  # running jobs whose shuffle map output it holds
    busy_ms: float = 0.0  # ended tasks plus the elapsed part of running ones
    tasks_finished: int = 0
    tasks_failed: int = 0
    gc_ms: float = 0.0
    run_ms: float = 0.0
    heap_used_bytes: int = -1  # -1 before any heartbeat or task end reported it
    heap_max_bytes: int = -1

    @property
    def live(self) -> bool:
        return self.removed_ms is None


@dataclass(frozen=True, slots=True)
class ListenerTotals:
    """Counters over every executor the listener saw, removed ones included."""

    slot_ms: float = 0.0
    busy_ms: float = 0.0
    tasks_finished: int = 0
    tasks_failed: int = 0
    tasks_killed: int = 0
    tasks_aged_out: int = 0  # running tasks whose end event was lost
    gc_ms: float = 0.0
    run_ms: float = 0.0
    executors_added: int = 0
    executors_removed: int = 0


@dataclass(frozen=True, slots=True)
class BatchTasks:
    """What the tasks of one micro-batch did."""

    busy_ms: float = 0.0  # task time of its ended tasks
    tasks: int = 0  # its ended tasks (succeeded, failed or killed)
    executors: int = 0  # distinct executors its tasks ran on
    first_launch_ms: int | None = None  # None before its first task launched
    last_end_ms: int | None = None  # None before its first task ended
    stages: int = 0  # stage attempts submitted for it


@dataclass(frozen=True, slots=True)
class QuerySnapshot:
    """One streaming query's jobs (attributed through the job property ``sql.streaming.queryId``)."""

    busy_ms: float = 0.0  # ended tasks plus the elapsed part of running ones
    tasks_finished: int = 0
    tasks_failed: int = 0
    run_ms: float = 0.0
    jobs_failed: int = 0
    max_stage_tasks: int = 0  # widest of its latest submitted stages; 0 before any
    batches: Mapping[str, BatchTasks] = field(default_factory=dict)  # its latest batches, by batch id


@dataclass(frozen=True, slots=True)
class SourceOffsets:
    """The latest offsets of a query's Kafka sources, read between batches (``SourceOffsets.java``)."""

    time_ms: int = 0  # when the brokers answered (the middle of its requests)
    offsets: float = 0.0  # the sum of the latest offsets of the partitions the sources last planned
    partitions: int = 0  # how many partitions the sum is over


@dataclass(frozen=True, slots=True)
class BridgeSnapshot:
    """The listener's counters at one instant (times epoch ms, durations ms, counters cumulative)."""

    time_ms: int = 0  # 0: no snapshot (the plugin is not running)
    app_id: str = ""
    cores_per_executor: int = 0
    executors: Mapping[str, ExecutorSnapshot] = field(default_factory=dict)  # by executor id
    totals: ListenerTotals = field(default_factory=ListenerTotals)
    queries: Mapping[str, QuerySnapshot] = field(default_factory=dict)  # by query id
    other_tasks: int = 0  # pending or running tasks of jobs outside every streaming query
    listener_events_dropped: int = 0  # events Spark's listener bus dropped so far (a queue was full)
    listener_id: str = ""  # change counts of another listener (a new SparkContext) are not comparable
    changes: int = 0  # changes to batches the listener has seen
    batches_since: int = -1  # the batches are those changed after this change count; -1: all of them
    batches_per_query: int = 0  # how many of a query's latest batches the listener keeps
    source_offsets: Mapping[str, SourceOffsets] = field(default_factory=dict)  # by query id

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> BridgeSnapshot:
        """The records of a snapshot as the JVM sends it (``{}`` gives the empty snapshot). Absent
        fields take the records' defaults and unknown ones are ignored, so a mismatch shows in the
        contract tests rather than as a failing tick."""
        return _parse(cls, document)


R = TypeVar("R")


def json_name(attribute: str) -> str:
    """The JSON field of a record attribute: ``first_launch_ms`` -> ``firstLaunchMs``."""
    head, *rest = attribute.split("_")
    return head + "".join(part.title() for part in rest)


def record_fields(record: type) -> dict[str, Any]:
    """A record's JSON fields and their Python types (resolved annotations)."""
    hints = typing.get_type_hints(record)
    return {json_name(f.name): hints[f.name] for f in dataclasses.fields(record)}


def _converter(kind: Any) -> Callable[[Any], Any]:
    """From a JSON value to a value of the annotated type; None (null or absent) is left to the caller."""
    if kind is int:
        return lambda v: int(v) if isinstance(v, int) else int(_number(v))
    if kind is float:
        return _number
    if kind is str:
        return str
    origin = typing.get_origin(kind)
    if origin in (types.UnionType, typing.Union):  # X | None
        (inner,) = [a for a in typing.get_args(kind) if a is not type(None)]
        return _converter(inner)
    if origin is not None and issubclass(origin, Mapping):  # Mapping[str, Record]: a map or a table
        _, value = typing.get_args(kind)
        parse = _converter(value)

        def by_id(v: Any) -> dict[str, Any]:
            if isinstance(v, list):
                return {str(row[0]): _parse_row(value, row) for row in v if isinstance(row, list) and row}
            return {str(k): parse(x) for k, x in v.items() if isinstance(x, Mapping)} \
                if isinstance(v, Mapping) else {}
        return by_id
    if dataclasses.is_dataclass(kind):
        return lambda v: _parse(kind, v) if isinstance(v, Mapping) else kind()
    raise TypeError(f"no JSON conversion for {kind!r}")


def _number(value: Any) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}")
    return number


_PLANS: dict[type, list[tuple[str, str, Callable[[Any], Any]]]] = {}


def _plan(record: type) -> list[tuple[str, str, Callable[[Any], Any]]]:
    """(attribute, JSON field, converter) of each of a record's fields, in their declared order."""
    plan = _PLANS.get(record)
    if plan is None:
        plan = _PLANS[record] = [(f.name, json_name(f.name), _converter(t))
                                 for f, t in zip(dataclasses.fields(record),  # type: ignore[arg-type]
                                                 record_fields(record).values(), strict=True)]
    return plan


def _parse(record: type[R], document: Mapping[str, Any]) -> R:
    values = {}
    for attribute, key, convert in _plan(record):
        value = document.get(key)
        if value is not None:
            try:
                values[attribute] = convert(value)
            except (TypeError, ValueError):
                pass  # a value of the wrong type: the default, as for an absent field
    return record(**values)


def _parse_row(record: type[R], row: Sequence[Any]) -> R:
    """A table's row: the id, then the record's fields in their declared order (a short row leaves
    the last ones at their defaults). A value already of its field's type is taken as it is (a
    table has a row per executor: a thousand rows a poll); a row whose every value is, or is null
    where the default is None, goes to the record as it is, once its floats are finite."""
    shape = (record, tuple(map(type, row)))
    floats = _ROW_SHAPES.get(shape, _UNSEEN)
    if floats is _UNSEEN:
        floats = _positional_floats(record, shape[1])
        if len(_ROW_SHAPES) < _MAX_ROW_SHAPES:
            _ROW_SHAPES[shape] = floats
    if isinstance(floats, tuple) and math.isfinite(sum(row[i] for i in floats)):
        return record(*row[1:])
    values = {}
    fields = zip(_plan(record), _exact_types(record), row[1:], strict=False)
    for (attribute, _, convert), exact, value in fields:
        if value is None:
            continue
        if type(value) is exact and (exact is not float or math.isfinite(value)):
            values[attribute] = value
            continue
        try:
            values[attribute] = convert(value)
        except (TypeError, ValueError):
            pass
    return record(**values)


# Per record and row shape (each value's type): the positions of its float values when the row
# can go to the record as it is (see _parse_row), else None.
_ROW_SHAPES: dict[tuple[type, tuple[type, ...]], tuple[int, ...] | None] = {}
_MAX_ROW_SHAPES = 256
_UNSEEN = object()


def _positional_floats(record: type, shape: tuple[type, ...]) -> tuple[int, ...] | None:
    """For a row of this shape (the id's type first): where its floats are when every value has
    its field's exact type or is null where the default is None, else None (convert each)."""
    defaults = [f.default for f in dataclasses.fields(record)]
    if len(shape) - 1 > len(defaults):
        return None
    floats = []
    columns = zip(shape[1:], _exact_types(record), defaults, strict=False)  # a short row: defaults
    for i, (kind, exact, default) in enumerate(columns, start=1):
        if kind is type(None) and default is None:
            continue
        if exact is None or kind is not exact:
            return None
        if kind is float:
            floats.append(i)
    return tuple(floats)


_EXACT: dict[type, tuple[type | None, ...]] = {}


def _exact_types(record: type) -> tuple[type | None, ...]:
    """Each field's type where a JSON value of it needs no conversion (int, float, str), else None."""
    exact = _EXACT.get(record)
    if exact is None:
        scalars = (int, float, str)
        exact = _EXACT[record] = tuple(
            next((t for t in scalars if kind is t or kind == t | None), None)
            for kind in record_fields(record).values())
    return exact


def with_tables_by_id(document: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's JSON with its tables (the executors) as maps of objects by id, each row's values
    under their JSON names: how tests and tools read one field of one executor."""
    if not isinstance(document.get("executors"), list):
        return document
    names = [key for _, key, _ in _plan(ExecutorSnapshot)]
    executors = {str(row[0]): dict(zip(names, row[1:], strict=False)) for row in document["executors"]}
    return {**document, "executors": executors}


class RecentBatches:
    """The queries' latest batches, kept across polls that carry only the batches that changed.

    At 100 queries the listener's 64 batches each are most of a snapshot's JSON, and between two
    polls a second apart a few of them change: :meth:`JvmBridge.poll` asks for those (the change
    count of the previous poll, :attr:`since`) and :meth:`merge` puts them with the others, keeping
    what the listener keeps (its ``batchesPerQuery`` latest per query, oldest first out).
    """

    def __init__(self) -> None:
        self._listener_id = ""
        self._changes = -1
        self._by_query: dict[str, dict[str, BatchTasks]] = {}

    @property
    def since(self) -> int:
        """The change count to ask the listener for the batches changed after; -1: all of them."""
        return self._changes

    def continues(self, snapshot: BridgeSnapshot) -> bool:
        """Whether ``snapshot`` completes what is kept: a whole one, or the changes of the same listener
        since :attr:`since` (a new SparkContext's listener counts from 0 again)."""
        return snapshot.batches_since == -1 or (
            snapshot.listener_id == self._listener_id and snapshot.batches_since == self._changes)

    def merge(self, snapshot: BridgeSnapshot) -> BridgeSnapshot:
        """``snapshot`` with every query's latest batches: its changed ones on top of those kept."""
        if snapshot.time_ms == 0:  # no plugin running: nothing to keep
            self._listener_id, self._changes, self._by_query = "", -1, {}
            return snapshot
        whole = snapshot.batches_since == -1
        keep = snapshot.batches_per_query
        kept: dict[str, dict[str, BatchTasks]] = {}
        queries = {}
        for query_id, query in snapshot.queries.items():
            batches = {} if whole else self._by_query.get(query_id, {})
            batches.update(query.batches)  # a changed batch keeps its place, a new one goes last
            while keep and len(batches) > keep:
                del batches[next(iter(batches))]
            kept[query_id] = batches
            queries[query_id] = dataclasses.replace(query, batches=dict(batches))
        # Queries the listener no longer tracks are forgotten here too.
        self._by_query, self._listener_id, self._changes = kept, snapshot.listener_id, snapshot.changes
        return dataclasses.replace(snapshot, queries=queries)
