"""The words of an evaluation: each query's figures and notes, and the headline that says what the
load needs and why."""

from __future__ import annotations

import math
from collections.abc import Mapping

from .. import readable
from ..decisions import QueryEvaluation
from ..model import BatchCost
from .demand import Demand
from .utilization import MAX_UTILIZATION


def query_result(d: Demand, cost: BatchCost | None, required: int, capped: bool,
                  utilization: float | None, predicted: float | None) -> QueryEvaluation:
    notes = list(d.notes)
    if cost is not None:
        notes.append(f"a batch: {cost.driver_s:.2f}s on the driver + task time "
                     f"{cost.fixed_task_s:.2f}s + {cost.per_executor_s:.2f}s per executor + "
                     f"{cost.per_row_s * 1000:.3g} ms per row over {cost.tasks} tasks")
    return QueryEvaluation(
        query_id=d.q.query_id, name=d.q.name, input_rate=d.processed_rate, backlog=d.backlog,
        backlog_growth_rate=d.growth, target_rate=d.rate, catch_up_rate=d.catch_up + d.provisioning,
        slot_seconds_per_row=cost.per_row_s if cost is not None else None,
        required_slots=float(required * (cost.cores if cost is not None else 1)),
        utilization=None if utilization is None else min(utilization, MAX_UTILIZATION),
        parallelism_cap=cost.widest if cost is not None else d.q.max_stage_tasks, capped=capped,
        backlog_mode=d.backlog_mode, note="; ".join(notes), trigger_s=d.trigger_s,
        batch_time_s=d.batch_time_s,
        predicted_batch_time_s=None if predicted is None or math.isinf(predicted) else predicted,
        rows_per_batch=d.rows_per_batch(), required_executors=required, rising=d.rising, cost=cost)

def explain(demands: list[Demand], queries: dict[str, QueryEvaluation],
             costs: dict[str, BatchCost | None], required: int, utilization: float,
             judged_at: int, live: int, capped: bool, other: float, empty: str,
             holding: Mapping[str, int], unsized: Mapping[str, float]) -> tuple[str, str]:
    """(the headline: what the load needs and why, in one line; the figures behind it)."""
    beyond = f" (the target; {live} live)" if live > judged_at else ""
    details = [f"utilization {_fraction(utilization)} on {readable.executors(judged_at)}{beyond}"]
    held = sum(holding.values())
    jobs_tasks = other - held - sum(unsized.values())
    parts = []
    if unsized:
        parts.append(f"{len(unsized)} {'query' if len(unsized) == 1 else 'queries'} still learning")
        details.append("still learning their cost, sized on the slots their tasks kept busy (at the "
                       "target): " + ", ".join(f"{readable.query(queries[q].name, q)} {slots:.1f}"
                                               for q, slots in unsized.items()))
    if held:
        parts.append(f"{held} real-time-mode tasks")
        details.append(f"real-time mode: {held} tasks of "
                       + ", ".join(readable.query(queries[q].name, q) for q in holding)
                       + " hold a slot each for their whole batch")
    if jobs_tasks:
        parts.append(f"other jobs' {jobs_tasks:.0f} pending or running tasks")
        details.append(f"other jobs (not streaming) have up to {jobs_tasks:.0f} pending or running "
                       "tasks, a slot each")
    jobs = " and ".join(parts)
    if not demands:
        if held and not empty:
            return f"{jobs} need {readable.executors(required)}", "; ".join(details)
        what = empty or "no active streaming query"
        need = (f"{jobs} need {readable.executors(required)}" if other
                else f"{readable.executors(required)} {'does' if required == 1 else 'do'}")
        return f"{what}; {need}", "; ".join(details)
    sized = [d for d in demands if d.q.query_id not in unsized] or demands
    busiest = max(sized, key=lambda d: (queries[d.q.query_id].required_executors,
                                        queries[d.q.query_id].utilization or 0.0))
    qe = queries[busiest.q.query_id]
    load = readable.rate(busiest.rate)
    if busiest.signal:
        load += f" ({busiest.signal})"
    if busiest.catch_up + busiest.provisioning > 0:
        load += f" + catch-up {readable.rate(busiest.catch_up + busiest.provisioning)}"
    who = readable.query(busiest.q.name, busiest.q.query_id)
    if len(demands) == 1:
        headline = f"{who}: arrivals {load}"
    else:
        others = len(sized) - 1
        headline = (f"{who} at {load}" if not others
                    else f"{who} at {load} and {others} other {'query' if others == 1 else 'queries'}")
    if other:
        headline += f" and {jobs}"
    headline += f" need {readable.executors(required)}"
    if capped:
        headline += " (more would not shorten its batches)"
    batches = []
    if qe.batch_time_s is not None:
        trigger = f" of a {readable.seconds(busiest.trigger_s)} trigger" if busiest.trigger_s else ""
        batches.append(f"batches {readable.seconds(qe.batch_time_s)}{trigger}")
    cost = costs.get(busiest.q.query_id)
    if qe.predicted_batch_time_s is not None:
        batches.append(f"{readable.seconds(qe.predicted_batch_time_s)} predicted on {live}")
        if cost is not None and required != live:
            at = cost.steady_batch_time(busiest.target, required, busiest.trigger_s)
            batches.append(f"{readable.seconds(at)} on {required}")
    if batches:
        details.append(f"{who}: " + ", ".join(batches))
    if capped:
        details.append(f"no size keeps it within the target: sized where more executors stop helping "
                       f"(capped at {qe.parallelism_cap} parallel tasks, its widest stage, and by the "
                       "time its batches spend on the driver or reading)")
    return headline, "; ".join(details)


def _fraction(value: float) -> str:
    return f">{MAX_UTILIZATION:g}" if value >= MAX_UTILIZATION else f"{value:.2f}"
