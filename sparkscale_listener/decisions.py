"""What evaluation produces and what the control loop acts on.

:class:`Evaluation` is the evaluator's view (demand per query, a recommended executor count);
:class:`Decision` is the policy's verdict after the utilization band, delays, limits, mode and
excluded periods. Every decision, "none" included, carries a reason a person can read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal

from .config.core import AutoscalerConfig
from .forecast import QueryForecast
from .model import BatchCost

Action = Literal["scale_up", "scale_down", "none", "rollback"]


@dataclass(frozen=True)
class Prediction:
    """What the model expected of one query when a change was applied: for the load it was sized
    on, the batch time at the old and the new size, the rows/s the new size can do and the time
    to drain the backlog. ``cost`` is the model it rested on: the outcome is predicted with it
    for the load that actually came."""

    query_id: str
    rate: float  # rows/s the query had to follow (arrivals + catch-up)
    rows_per_batch: float | None  # None: no trigger
    needed_executors: int  # what this query alone needed: a scale-up is judged on the queries it was for
    batch_time_before_s: float | None
    batch_time_s: float | None
    throughput: float  # rows/s the new size does at most
    drain_s: float | None  # None: no backlog to drain; inf: it would never drain
    cost: BatchCost

    def summary(self) -> dict[str, Any]:
        """The figures for events and the UI, rounded, in their units."""
        return {"rateRowsPerS": _round(self.rate), "rowsPerBatch": _round(self.rows_per_batch),
                "batchTimeBeforeS": _round(self.batch_time_before_s), "batchTimeS": _round(self.batch_time_s),
                "throughputRowsPerS": _round(self.throughput), "drainS": _round(self.drain_s),
                "modelError": _round(self.cost.error)}


@dataclass(frozen=True)
class Outcome:
    """What a change did, measured on the new executors' warm batches and compared with what the
    model predicted for the rows those batches actually read."""

    query_id: str
    batches: int  # warm batches measured at the new size
    rows_per_batch: float
    batch_time_s: float  # observed (median)
    predicted_s: float  # the model's batch time at the new size, for those rows
    predicted_before_s: float  # ... and at the old size
    executors: int  # the size those batches ran on (a capacity limit may have held it below the request)
    # The policy's verdict (policy.ScaleUpBlocks.judged), None until it is given: whether the change
    # gained at least the ineffective-scale-up threshold of the predicted gain, and why, in words.
    effective: bool | None = None
    verdict: str = ""

    def summary(self) -> dict[str, Any]:
        return {"batches": self.batches, "rowsPerBatch": _round(self.rows_per_batch),
                "batchTimeS": _round(self.batch_time_s), "predictedS": _round(self.predicted_s),
                "predictedBeforeS": _round(self.predicted_before_s), "effective": self.effective,
                "verdict": self.verdict}


@dataclass(frozen=True)
class ScalingRecord:
    """One applied executor change, remembered for stabilization, checkers and the judging of its
    outcome."""

    time: float
    action: Action
    from_executors: int
    to_executors: int
    reason: str
    # Per query: processed rows/s before the change (what the checkers compare after it).
    rate_before: dict[str, float] = field(default_factory=dict)
    # Per query: what the model expected of the change.
    predictions: dict[str, Prediction] = field(default_factory=dict)

    def cut_short(self) -> tuple[str, int] | None:
        """(query id, executors it needed) of a scale-up that gave a query fewer executors than
        it needed (``scaleUp.maxFactor`` limited it), else None."""
        if self.action != "scale_up":
            return None
        short = [(qid, p.needed_executors) for qid, p in self.predictions.items()
                 if p.needed_executors > self.to_executors]
        return max(short, key=lambda s: s[1]) if short else None


@dataclass(frozen=True)
class ScalingContext:
    """What the control loop tells the evaluator and policy at each tick."""

    now: float
    config: AutoscalerConfig
    current_target: int  # the executor total the autoscaler has asked for (or found at start)
    live_executors: int
    pending_executors: int  # requested, not yet registered
    cores_per_executor: int
    window_start: float  # samples older than this must not be used (start / last change)
    provisioning_time_s: float  # learned request -> registered time
    last_scaling: ScalingRecord | None = None
    task_cpus: int = 1  # spark.task.cpus: the cores one task occupies
    # Task slots of the live executors, from each one's own cores (executors may differ in size);
    # None: live_executors x slots_per_executor.
    live_slots: int | None = None
    # Rows/s each query processed over the window (counter deltas): the measure a scale-up's
    # effect is judged by, the same one its "before" rate was taken with.
    processed_rates: dict[str, float] = field(default_factory=dict)
    # Each query's forecast of its arrivals (forecast.mode shadow or on), once it has one.
    forecasts: Mapping[str, QueryForecast] = field(default_factory=dict)

    @property
    def slots_per_executor(self) -> int:
        """Task slots one more executor brings: its cores (``spark.executor.cores``) divided by
        ``spark.task.cpus``."""
        return max(1, self.cores_per_executor // max(1, self.task_cpus))

    @property
    def slots(self) -> int:
        """Task slots of the live executors: what the load is measured against."""
        if self.live_slots is not None:
            return self.live_slots
        return self.live_executors * self.slots_per_executor


@dataclass(frozen=True)
class QueryEvaluation:
    query_id: str
    name: str | None
    input_rate: float  # rows/s read by the query over the window
    backlog: float | None
    backlog_growth_rate: float  # rows/s the backlog grew by over the window (negative: shrinking)
    target_rate: float  # input_rate + backlog growth: the arrival rate
    catch_up_rate: float  # backlog / catchUpDuration
    slot_seconds_per_row: float | None  # busy task time per row; None: not measurable yet
    required_slots: float  # slots needed at the target utilization (after the parallelism cap)
    utilization: float | None  # how busy the current size (see Evaluation) keeps it, on the band's scale
    parallelism_cap: int | None
    capped: bool  # the cap, not demand, limits required_slots
    backlog_mode: bool
    note: str = ""
    trigger_s: float | None = None  # None: the default trigger (next batch at once)
    batch_time_s: float | None = None  # its recent batches' typical duration
    predicted_batch_time_s: float | None = None  # the model's, on the live executors, for target_rate
    rows_per_batch: float | None = None  # rows a batch must read to follow target + catch-up
    required_executors: int = 0  # the fewest executors keeping this query within the target alone
    rising: bool = False  # its latest batches show arrivals rising or batches lengthening
    cost: BatchCost | None = None  # its fitted performance model


@dataclass(frozen=True)
class Evaluation:
    time: float
    ready: bool  # False: not enough data (window not full, stabilizing); no decision
    current_executors: int
    recommended_executors: int  # what the load needs; the policy bounds it, delays it, limits it
    required_slots: float
    # How busy the current executors are against the target (0.7 = exactly at utilization.target
    # 0.7): the number the policy's band is applied to. Of the target's executors where more are
    # live (leaving, or started unasked): those beyond it are going.
    utilization: float | None
    backlog_mode: bool
    queries: dict[str, QueryEvaluation] = field(default_factory=dict)
    reason: str = ""  # the figures behind the headline
    rising: bool = False  # some query's load is rising: no scale-down now
    # The arrivals up to this moment are measured: the start of the latest completed batch of the
    # query that is furthest behind (a batch reads what arrived before it started). None: no such
    # bound (an evaluator that does not say, or only idle queries). A scale-down that came due
    # later waits for a batch started after it, so a step just begun is not scaled down blind.
    measured_until: float | None = None
    # The measured outcome of the last change, per query, once its warm batches are in: on one
    # evaluation per change (the first that measures it).
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    # What the load needs, in one line ("query 'orders': arrivals 500 rows/s need 4 executors").
    headline: str = ""
    # The queries still learning their cost, as reasons name them: the others are sized, and the
    # policy keeps the current size meanwhile (policy.held_while_learning).
    still_learning: tuple[str, ...] = ()
    # What the forecast load needs (evaluator.sizing.size_ahead), applied or in shadow; None: no forecast.
    forecast: ForecastSizing | None = None


@dataclass(frozen=True)
class ForecastSizing:
    """The executors the forecast load needs: ``ahead`` for the load a provisioning time plus a batch
    ahead (a pre-scale), ``returning`` for the load within scaleDownInterval (no scale-down below it).
    ``applied``: they raised the recommendation; else shadow, shown only. ``every_query``: each query
    sized has an applied forecast (a scale-down they confirm need not wait scaleDownInterval out).
    ``text`` says which query's forecast asked for the most and why it is applied or not."""

    ahead: int
    returning: int
    applied: bool
    text: str
    every_query: bool = False

    def summary(self) -> dict[str, Any]:
        return {"ahead": self.ahead, "returning": self.returning, "applied": self.applied,
                "everyQuery": self.every_query, "text": self.text}


def not_ready(time: float, current_executors: int, whys: Sequence[str]) -> Evaluation:
    """The one form of "no decision yet" (an evaluator's, or the control loop's after lost listener
    events): the current size recommended, the first reason (and how many more) in the headline,
    all of them in the details."""
    more = f" (and {len(whys) - 1} more)" if len(whys) > 1 else ""
    return Evaluation(time=time, ready=False, current_executors=current_executors,
                      recommended_executors=current_executors, required_slots=0.0, utilization=None,
                      backlog_mode=False, headline=f"not ready: {whys[0]}{more}",
                      reason="; ".join(whys) if len(whys) > 1 else "")


@dataclass(frozen=True)
class Decision:
    """What the policy decided at one tick: ``reason`` is its headline (what and why, in one short
    line: logs, events and the UI show it), ``details`` the figures behind it."""

    time: float
    action: Action
    from_executors: int
    to_executors: int
    reason: str
    applied: bool = False  # True once the realizer carried it out
    evaluation: Evaluation | None = None
    limited_by: str | None = None  # "maxExecutors", "minExecutors", "parallelism", "scaleUp.maxFactor" ...
    # An applied change: what the model expected of it per query, and once measured what it did.
    predictions: dict[str, Prediction] = field(default_factory=dict)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    details: str = ""


def decision_to_dict(decision: Decision) -> dict[str, Any]:
    out: dict[str, Any] = {
        "time": decision.time,
        "action": decision.action,
        "from_executors": decision.from_executors,
        "to_executors": decision.to_executors,
        "reason": decision.reason,
        "details": decision.details,
        "applied": decision.applied,
        "limited_by": decision.limited_by,
    }
    if decision.predictions:
        out["predictions"] = {q: p.summary() for q, p in decision.predictions.items()}
    if decision.outcomes:
        out["outcomes"] = {q: o.summary() for q, o in decision.outcomes.items()}
    ev = decision.evaluation
    if ev is not None:
        out["utilization"] = ev.utilization
        out["recommended_executors"] = ev.recommended_executors
        out["required_slots"] = ev.required_slots
        out["backlog_mode"] = ev.backlog_mode
        if ev.forecast is not None:
            out["forecast"] = ev.forecast.summary()
        # Shallow: the fields are figures, and the model (cost) is left out, so asdict's deep copy
        # of it would be wasted work at every tick.
        out["queries"] = {q: {f.name: getattr(e, f.name) for f in fields(e) if f.name != "cost"}
                          for q, e in ev.queries.items()}
    return out


def _round(value: float | None) -> float | None:
    """4 significant digits; None for unknown and unbounded values (JSON has no Infinity)."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.4g}")
