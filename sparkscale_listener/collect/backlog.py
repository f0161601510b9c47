"""Backlog parsing (pure): what each source of a query still has to read, from its progress.

Handles every source shape Spark reports: numeric offsets, nested per-partition offsets (Kafka,
Python data sources), Kafka's ``*OffsetsBehindLatest`` metrics, file/Delta ``numFilesOutstanding``;
anything else gives ``None``. A Kafka lag that cannot be true (negative, larger than the log, a
partition gone) gives ``None`` with the reason. :func:`query_backlog` turns each source's backlog
into rows, the unit of the arrival rate, with the rows per offset (or file) the source's batches
read, which the recorder learns per query.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from ..metrics import SourceBacklog

log = logging.getLogger("sparkscale")

# Generators, not queues: their latest offset is whatever they were asked for, so no backlog.
_RATE_SOURCE = re.compile(r"^\s*Rate(StreamV2|Source|PerMicroBatchStream)\b")
KAFKA_SOURCE = re.compile(r"Kafka", re.IGNORECASE)
# Delta offsets are table versions plus file indexes: their differences are not a backlog.
_DELTA_SOURCE = re.compile(r"^\s*DeltaSource\b")
_KAFKA_METRICS = ("avgOffsetsBehindLatest", "maxOffsetsBehindLatest", "minOffsetsBehindLatest")


def parse_offset(value: Any) -> Any:
    """An offset as reported (JSON value, or its JSON text) -> Python value; unparsable -> None."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _numeric_leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], float]]:
    if is_finite_number(value):
        yield path, float(value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _numeric_leaves(item, (*path, str(key)))


def offset_difference(end: Any, latest: Any) -> float | None:
    """``latest - end`` for numeric offsets or objects with numeric leaves; None if not comparable.

    Per key path (e.g. Kafka ``{"topic": {"0": 120, "1": 98}}``) the differences are summed, each
    clamped at 0 so that one odd partition cannot cancel another's backlog. Paths present in only
    one of the two offsets (a partition that just appeared) are ignored.
    """
    if end is None or latest is None:
        return None
    if is_finite_number(end) and is_finite_number(latest):
        return max(0.0, float(latest) - float(end))
    if not (isinstance(end, Mapping) and isinstance(latest, Mapping)):
        return None
    end_leaves = dict(_numeric_leaves(end))
    total, matched = 0.0, False
    for path, latest_value in _numeric_leaves(latest):
        if path in end_leaves:
            matched = True
            total += max(0.0, latest_value - end_leaves[path])
    return total if matched else None


def _metric(metrics: Mapping[str, Any], name: str) -> float | None:
    value = metrics.get(name)
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def source_backlog(source: Mapping[str, Any]) -> SourceBacklog:
    """What one source (an entry of a progress's ``sources``) still has to read, in the unit it
    reports (not yet converted to rows: see :func:`query_backlog`). Never raises."""
    description = str(source.get("description") or "") if isinstance(source, Mapping) else ""
    try:
        return _source_backlog(source, description)
    except Exception:  # a malformed progress must never break collection
        log.debug("cannot parse the backlog of source %r", description, exc_info=True)
        return SourceBacklog(description, None)


def _is_kafka(description: str, metrics: Mapping[str, Any]) -> bool:
    return bool(KAFKA_SOURCE.search(description)) or any(k in metrics for k in _KAFKA_METRICS)


def _metrics_of(source: Mapping[str, Any]) -> Mapping[str, Any]:
    metrics = source.get("metrics") or {}
    return metrics if isinstance(metrics, Mapping) else {}


def _source_backlog(source: Mapping[str, Any], description: str) -> SourceBacklog:
    if _RATE_SOURCE.match(description):
        return SourceBacklog(description, None)
    metrics = _metrics_of(source)

    # File and Delta sources count what is left in files; their offsets are log/table versions.
    files = _metric(metrics, "numFilesOutstanding")
    if files is not None:
        if files < 0:
            return SourceBacklog(description, None, "files",
                                 problem=f"reported {files:.0f} files outstanding, a negative backlog")
        return SourceBacklog(description, files, "files")
    if _DELTA_SOURCE.match(description):
        return SourceBacklog(description, None, "files")

    end = parse_offset(source.get("endOffset"))
    latest = parse_offset(source.get("latestOffset"))
    if not _is_kafka(description, metrics):
        diff = offset_difference(end, latest)
        return SourceBacklog(description, diff, "rows")

    lag, problem = kafka_lag(end, latest)
    if lag is not None or problem is not None:
        return SourceBacklog(description, lag, "offsets", problem=problem)
    # No comparable offsets: avg x partitions is the exact sum; max is a lower bound of it.
    avg = _metric(metrics, "avgOffsetsBehindLatest")
    partitions = sum(1 for _ in _numeric_leaves(end)) if isinstance(end, Mapping) else 0
    candidates = [(avg * partitions, "avgOffsetsBehindLatest")] if avg is not None and partitions else []
    for name in ("maxOffsetsBehindLatest", "avgOffsetsBehindLatest"):
        value = _metric(metrics, name)
        if value is not None:
            candidates.append((value, name))
    if candidates:
        value, name = candidates[0]
        if value < 0:
            return SourceBacklog(description, None, "offsets",
                                 problem=f"{name}={_metric(metrics, name):g} is a negative lag")
        return SourceBacklog(description, value, "offsets")
    return SourceBacklog(description, None, "offsets")


def _partition_name(path: tuple[str, ...]) -> str:
    return "-".join(path)  # Kafka's own topic-partition spelling


def kafka_lag(end: Any, latest: Any) -> tuple[float | None, str | None]:
    """A Kafka source's lag in offsets, summed over partitions: ``(lag, None)``; ``(None, why)``
    when the offsets make no sense; ``(None, None)`` when they are not there to compare.

    Unlike :func:`offset_difference` nothing is clamped: a partition whose latest offset is behind
    the query's end offset (the topic was deleted and made again, or truncated), a negative offset,
    or a partition that vanished from the latest offsets means the lag is unknown. A lag larger
    than the log (more offsets behind than the partition ever held) shows as a negative end offset.
    Partitions only in the latest offsets (just added) are not counted: the query has not
    reached them yet.
    """
    if not (isinstance(end, Mapping) and isinstance(latest, Mapping)):
        return None, None
    end_leaves = dict(_numeric_leaves(end))
    latest_leaves = dict(_numeric_leaves(latest))
    if not end_leaves or not latest_leaves:
        return None, None
    total = 0.0
    for path, end_offset in end_leaves.items():
        name = _partition_name(path)
        latest_offset = latest_leaves.get(path)
        if latest_offset is None:
            return None, f"partition {name} is missing from the latest offsets (topic deleted?)"
        if latest_offset < 0:
            return None, f"partition {name} has a negative latest offset ({latest_offset:.0f})"
        if end_offset < 0:
            return None, (f"partition {name} lag {latest_offset - end_offset:.0f} is larger than its log "
                          f"({latest_offset:.0f} offsets): end offset {end_offset:.0f}")
        if latest_offset < end_offset:
            return None, (f"partition {name} has a negative lag: latest offset {latest_offset:.0f} is "
                          f"behind the query's end offset {end_offset:.0f} (topic recreated or "
                          "truncated?)")
        total += latest_offset - end_offset
    return total, None


def source_units_read(source: Mapping[str, Any]) -> float | None:
    """How many of its own units (Kafka offsets, Delta files) a batch read from this source, from
    the batch's start and end offsets; None when they do not tell (first batch, offsets that went
    backwards, a Delta batch spanning table versions, a source counted in rows)."""
    try:
        description = str(source.get("description") or "")
        start = parse_offset(source.get("startOffset"))
        end = parse_offset(source.get("endOffset"))
        if not (isinstance(start, Mapping) and isinstance(end, Mapping)):
            return None
        if _DELTA_SOURCE.match(description):
            # Within one table version the offset's index counts the version's files read so far.
            same_version = start.get("reservoirVersion") == end.get("reservoirVersion")
            i0, i1 = start.get("index"), end.get("index")
            if same_version and is_finite_number(i0) and is_finite_number(i1) and i1 >= i0:
                return float(i1 - i0)
            return None
        if not _is_kafka(description, _metrics_of(source)):
            return None
        start_leaves = dict(_numeric_leaves(start))
        end_leaves = dict(_numeric_leaves(end))
        if not end_leaves:
            return None
        total = 0.0
        for path, end_offset in end_leaves.items():
            start_offset = start_leaves.get(path)
            if start_offset is None or start_offset < 0 or end_offset < start_offset:
                return None
            total += end_offset - start_offset
        return total
    except Exception:  # malformed progress: no measurement, never an error
        return None


def batch_rows_per_unit(source: Mapping[str, Any]) -> float | None:
    """Rows per unit (offset, file) one batch of this source read; None if it does not tell.

    A Kafka offset holds at most one record (transaction markers and compacted records leave
    offsets without one), so a batch reporting more rows than offsets is not a measurement.
    """
    units = source_units_read(source)
    rows = _metric(source, "numInputRows") if isinstance(source, Mapping) else None
    if units is None or units <= 0 or rows is None or rows < 0:
        return None
    ratio = rows / units
    kafka = _is_kafka(str(source.get("description") or ""), _metrics_of(source))
    return None if kafka and ratio > 1.0 else ratio


# Before any batch of a source was measured: one row per Kafka offset, an upper bound (see
# batch_rows_per_unit). Files hold any number of rows, so they have no default.
DEFAULT_ROWS_PER_UNIT: dict[str, float] = {"offsets": 1.0}


def in_rows(backlog: SourceBacklog, rows_per_unit: float | None) -> SourceBacklog:
    """The source's backlog with its conversion to rows (``rows_per_unit``, learned from its
    batches; else the unit's default), or with a problem saying why it cannot be converted."""
    if backlog.backlog is None or backlog.unit == "rows":
        return backlog
    rate = rows_per_unit if rows_per_unit is not None else DEFAULT_ROWS_PER_UNIT.get(backlog.unit)
    if rate is None:
        unit = backlog.unit[:-1] if backlog.unit.endswith("s") else backlog.unit
        return replace(backlog, rows_per_unit=None, problem=(
            f"{backlog.backlog:.0f} {backlog.unit} behind, not counted: rows per {unit} not known until "
            "a batch shows how many it read"))
    return replace(backlog, rows_per_unit=rate, problem=None)


def query_backlog(sources: Any, rows_per_unit: Mapping[str, float] | None = None,
                  ) -> tuple[float | None, tuple[SourceBacklog, ...]]:
    """(the query's backlog in rows, or None; per-source backlogs with their conversion to rows).

    ``rows_per_unit`` maps a source's description to what its batches showed (the recorder learns
    it over recent batches); a source not in it uses its own batch, then the unit's default. The
    query's backlog sums the sources known in rows; a source in a unit that cannot be converted is
    left out (its ``problem`` says so); a source whose lag makes no sense makes the whole query's
    backlog unknown (None), so no decision is taken on it.
    """
    learned = rows_per_unit or {}
    per_source = []
    for source in sources or ():
        if not isinstance(source, Mapping):
            continue
        backlog = source_backlog(source)
        rate = learned.get(backlog.description)
        per_source.append(in_rows(backlog, rate if rate is not None else batch_rows_per_unit(source)))
    if any(s.nonsense for s in per_source):
        return None, tuple(per_source)
    known = [s.rows for s in per_source if s.rows is not None]
    return (sum(known) if known else None), tuple(per_source)


def backlog_problem(per_source: tuple[SourceBacklog, ...]) -> str | None:
    """One line for people: why a query has no backlog signal, or what its backlog leaves out."""
    nonsense = [s for s in per_source if s.nonsense]
    if nonsense:
        return "no backlog signal: " + "; ".join(f"{s.description}: {s.problem}" for s in nonsense)
    partial = [s for s in per_source if s.problem]
    return "; ".join(f"{s.description}: {s.problem}" for s in partial) or None


def learned_rows_per_unit(samples: Mapping[str, deque[tuple[float, float]]]) -> dict[str, float]:
    rates = {}
    for description, batches in samples.items():
        units = sum(u for _, u in batches)
        if units > 0:
            rates[description] = sum(r for r, _ in batches) / units
    return rates
