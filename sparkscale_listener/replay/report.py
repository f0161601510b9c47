"""A :class:`~.run.Comparison` for people and programs: a markdown summary, a JSON document and a
PNG (executors and lag against load over time, one panel per run). The PNG needs matplotlib (the
``replay`` extra); :func:`plot` raises :class:`PlotUnavailable` without it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..config.options import PREFIX
from .history import Action, QueryHistory
from .run import ActualRun, Comparison, ReplayRun, Series, settings_of

REASON_CHARS = 160  # a decision's reason is cut to this in the markdown (the JSON keeps it whole)
LAG_COLUMNS = ("max age of the oldest waiting row (s)", "mean age of the oldest waiting row (s)")


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def markdown(c: Comparison) -> str:
    app, h = c.app, c.history
    duration = h.end - h.start
    lines = [f"# Replay of {app.name or app.app_id or app.path}", "",
             f"`{app.path}`: Spark {app.spark_version or '?'}, application {app.app_id or '?'}, "
             f"{'with' if app.ran_sparkscale else 'without'} sparkscale; replayed {_clock(h.start)} to "
             f"{_clock(h.end)} UTC ({duration:.0f} s), executors of {h.cores} task slot(s).", ""]
    for q in h.queries:
        cost = q.cost
        lines.append(f"- query `{q.label}`: {len(q.batches)} batches, trigger "
                     f"{f'{q.trigger_s:g} s' if q.trigger_s else 'none'}, arrivals "
                     f"{_range(q)}; fitted cost per batch {cost.driver_s:.2f} s driver + "
                     f"{cost.fixed_task_s:.2f} s + {cost.per_row_s * 1000:.3g} ms/row of task time, "
                     f"{cost.widest} tasks wide (model error {cost.error:.0%})")
    lines += ["", f"| run | actions | scale-ups | scale-downs | flaps | executor-s | {LAG_COLUMNS[0]} | "
              f"{LAG_COLUMNS[1]} |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    lines.append(_row("what it did", c.actual))
    lines += [_row(f"sparkscale: {r.label}", r) for r in c.runs]
    lines.append("")
    lines.append("Age of the oldest waiting row (the lag): how long the oldest row that no completed batch "
                 "had read yet had waited, for the query where it waited longest, at each control tick "
                 "(predicted for the replays). Flaps: opposite actions less than scaleDownInterval apart.")
    lines += ["", "## What it did", ""]
    if c.actual.actions or not h.late_actions:
        lines += _actions(c.actual.actions, h.start)
    # Listed, so that what it did matches the actions the application logged.
    lines += _actions(h.late_actions, h.start, " (after the queries' last batch: outside the replayed "
                      "window)")
    recorded = settings_of(app)
    for r in c.runs:
        lines += ["", f"## sparkscale with {r.label}", "", _settings_line(r, recorded), ""]
        if r.agreement is not None:
            lines += [f"**Fidelity**: {r.agreement.summary}.", ""]
        lines += _actions(r.actions, h.start)
        for error in r.errors:
            lines.append(f"- control loop error (it went on): {error}")
    lines += ["", "## Assumptions", ""] + [f"- {a}" for a in c.assumptions]
    return "\n".join(lines) + "\n"


def to_json(c: Comparison) -> dict[str, Any]:
    h = c.history

    def series(s: Series) -> dict[str, Any]:
        return {"t": [round(t - h.start, 3) for t in s.t], "executors": list(s.executors),
                "load": [round(x, 3) for x in s.load], "lagS": [round(x, 3) for x in s.lag_s]}

    def actions(items: Sequence[Action]) -> list[dict[str, Any]]:
        return [{"t": round(a.time - h.start, 3), "time": a.time, "action": a.action,
                 "from": a.from_executors, "to": a.to_executors, "reason": a.reason} for a in items]

    def run(r: ReplayRun | ActualRun) -> dict[str, Any]:
        out: dict[str, Any] = {
            "executorSeconds": round(r.executor_seconds, 3), "flaps": r.flaps,
            "maxLagS": _finite(r.series.max_lag_s), "meanLagS": _finite(r.series.mean_lag_s),
            "actions": actions(r.actions), "series": series(r.series)}
        if isinstance(r, ReplayRun):
            out = {"label": r.label, "settings": dict(r.settings), "mode": r.config.mode,
                   "provisioningS": r.provisioning_s,
                   "errors": list(r.errors)} | out
            if r.agreement is not None:
                a = r.agreement
                out["agreement"] = {"recorded": a.recorded, "reproduced": a.reproduced, "extra": a.extra,
                                    "sameCounts": a.same_counts, "toleranceS": a.tolerance_s,
                                    "notCompared": a.outside, "summary": a.summary}
        return out

    app = c.app
    return {
        "eventLog": app.path, "appId": app.app_id, "appName": app.name, "sparkVersion": app.spark_version,
        "ranSparkscale": app.ran_sparkscale, "start": h.start, "end": h.end, "slotsPerExecutor": h.cores,
        "queries": [{"name": q.label, "queryId": q.query_id, "batches": len(q.batches),
                     "triggerS": q.trigger_s, "readLimitRows": q.read_limit, "cost": {
                         "driverS": q.cost.driver_s, "fixedTaskS": q.cost.fixed_task_s,
                         "perExecutorS": q.cost.per_executor_s, "perRowS": q.cost.per_row_s,
                         "tasks": q.cost.tasks, "widest": q.cost.widest, "efficiency": q.cost.efficiency,
                         "error": q.cost.error, "fitted": q.cost_fitted}} for q in h.queries],
        "actual": run(c.actual), "replays": [run(r) for r in c.runs], "assumptions": list(c.assumptions)}


def write(c: Comparison, out: Path, plot_png: bool = True) -> list[Path]:
    """The markdown, the JSON and (when matplotlib is there) the PNG, in ``out``; the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "replay.md", out / "replay.json"]
    written[0].write_text(markdown(c))
    written[1].write_text(json.dumps(to_json(c), indent=1) + "\n")
    if plot_png:
        written.append(plot(c, out / "replay.png"))
    return written


def plot(c: Comparison, path: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotUnavailable("the PNG needs matplotlib: pip install 'sparkscale-listener[replay]'") from e
    h = c.history
    panels: list[tuple[str, Series, Sequence[Action]]] = [("what it did", c.actual.series, c.actual.actions)]
    panels += [(f"sparkscale: {r.label}", r.series, r.actions) for r in c.runs]
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.6 * len(panels)), sharex=True, squeeze=False)
    top = max(max(s.executors, default=1.0) for _, s, _ in panels) + 1
    lag_top = max(max(s.lag_s, default=0.0) for _, s, _ in panels) * 1.1 or 1.0
    for ax, (title, s, acts) in zip(axes[:, 0], panels, strict=True):
        t = [x - h.start for x in s.t]
        ax.step(t, s.executors, where="post", color="tab:blue", label="executors")
        ax.set_ylim(0, top)
        ax.set_ylabel("executors")
        for a in acts:
            up = a.to_executors > a.from_executors
            ax.axvline(a.time - h.start, color="tab:green" if up else "tab:red", alpha=0.4, linestyle="--")
        load_ax = ax.twinx()
        load_ax.plot(t, s.load, color="tab:gray", alpha=0.6, label="load (rows/s)")
        load_ax.set_ylabel("rows/s")
        lag_ax = ax.twinx()
        lag_ax.spines["right"].set_position(("axes", 1.1))
        lag_ax.plot(t, s.lag_s, color="tab:orange", label="age of the oldest waiting row (s)")
        lag_ax.set_ylim(0, lag_top)
        lag_ax.set_ylabel("oldest row waiting (s)")
        ax.set_title(title, fontsize=10, loc="left")
        handles = [*ax.get_legend_handles_labels()[0], *load_ax.get_legend_handles_labels()[0],
                   *lag_ax.get_legend_handles_labels()[0]]
        ax.legend(handles=handles, loc="upper left", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the first query started")
    fig.suptitle(f"Replay of {c.app.name or c.app.path}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _row(label: str, r: ReplayRun | ActualRun) -> str:
    ups = sum(1 for a in r.actions if a.to_executors > a.from_executors)
    return (f"| {label} | {len(r.actions)} | {ups} | {len(r.actions) - ups} | {r.flaps} | "
            f"{r.executor_seconds:.0f} | {r.series.max_lag_s:.1f} | {r.series.mean_lag_s:.1f} |")


def _settings_line(r: ReplayRun, recorded: Mapping[str, str]) -> str:
    """The ``spark.sparkscale.*`` settings a replay ran with, each said where it came from."""
    def listed(items: Mapping[str, str]) -> str:
        return ", ".join(f"`{k.removeprefix(PREFIX)}={v}`" for k, v in items.items())

    given = {k: v for k, v in sorted(r.settings.items()) if recorded.get(k) != v}
    logged = {k: v for k, v in sorted(r.settings.items()) if k not in given}
    parts = [f"{listed(given)} (given)"] if given else []
    parts += [f"{listed(logged)} (from the log)"] if logged else []
    if PREFIX + "mode" not in r.settings:
        parts.append(f"`mode={r.config.mode}` (the replay's default)")
    return (f"Replayed with the {PREFIX}* settings {'; '.join(parts)}; every other key at its default "
            "(docs/configuration.md).")


def _actions(actions: Sequence[Action], start: float, note: str = "") -> list[str]:
    if not actions:
        return [] if note else ["No executor change."]
    out = []
    for a in actions:
        reason = a.reason if len(a.reason) <= REASON_CHARS else a.reason[:REASON_CHARS - 3] + "..."
        out.append(f"- t={a.time - start:.0f} s: {a.action} {a.from_executors} -> {a.to_executors}{note}"
                   + (f": {reason}" if reason else ""))
    return out


def _range(q: QueryHistory) -> str:
    rates = [r for r in q.rates if r > 0]
    if not rates:
        return "none"
    low, high = min(rates), max(rates)
    return f"{low:.3g} rows/s" if math.isclose(low, high, rel_tol=0.05) else f"{low:.3g} to {high:.3g} rows/s"


def _clock(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _finite(x: float) -> float | None:
    return round(x, 3) if math.isfinite(x) else None
