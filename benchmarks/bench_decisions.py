"""Decision quality in the simulator: sparkscale against the alternatives a user has, on the same
loads, cluster and queries, against an oracle. Run on purpose:

    .venv/bin/python benchmarks/bench_decisions.py            # the full run, a few minutes
    .venv/bin/python benchmarks/bench_decisions.py --quick    # two loads, shorter: a smoke run

Writes ``benchmarks/results/decisions.md`` (the table), ``decisions-<load>.png`` (executors and
lag against load over time, a panel per policy) and ``day.png`` (the compressed day, for the
README). The figures are those of :mod:`figures`; the alternatives are in :mod:`alternatives`.

The simulated cluster carries what real clusters show: a per-task and per-executor fixed task
cost per batch (calibrated on the real measurement of 0.035 slot-s/row for 20 rows/s on 6
partitions and 2 executors), a provisioning delay, launches that once started (after
``LAUNCH_COMMIT_S``) complete whatever the target does, and arrivals with noise.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import scenario_matrix
from benchmarks.alternatives import (
    ClusterModel,
    DStreamsAllocation,
    NeverReadyEvaluator,
    OccupancyRule,
    SparkDynamicAllocation,
)
from benchmarks.figures import OTHER_TARGET, Timeline, figures, other_target
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.sim import SimQuery, SimResult, Simulation, smallest_sufficient_executors

RESULTS = Path(__file__).resolve().parent / "results"

# The cluster and the queries, shared by every load.
CORES_PER_EXECUTOR = 2
MAX_EXECUTORS = 20
PROVISIONING_DELAY_S = 30.0  # request -> registered
LAUNCH_COMMIT_S = 2.0  # a launch older than this is not cancelled by a lower target
TRIGGER_S = 10.0
COST_PER_ROW = 0.002  # marginal slot-seconds per row
PARTITIONS = 32
BATCH_OVERHEAD_S = 0.5  # driver time per batch
# Fixed task time per batch. Calibration: 6 partitions x 0.05 + 2 executors x 0.1 = 0.5 slot-s,
# which on the real 20 rows/s x 1 s batches of 10 ms rows gives (0.2 + 0.5) / 20 = 0.035 slot-s/row.
TASK_OVERHEAD_S = 0.05
EXECUTOR_OVERHEAD_S = 0.1
STEP_NOISE = 0.05
DAY_NOISE = 0.2
SEED = 1

# sparkscale's defaults the figures are read against.
DEFAULTS = AutoscalerConfig(max_executors=MAX_EXECUTORS)
UTILIZATION_TARGET = DEFAULTS.utilization_target
BACKLOG_THRESHOLD_S = DEFAULTS.backlog_threshold_s
SCALE_DOWN_INTERVAL_S = DEFAULTS.scale_down_interval_s

# sparkscale twice: with its defaults, and with the scale-down delay shortened to the occupancy
# rule's own period (60 s), the trade-off a user makes with scaleDownInterval.
SHORT_SCALE_DOWN = "sparkscale-60s"
POLICIES = ("sparkscale", SHORT_SCALE_DOWN, "static-peak", "static-average", "dynamic-allocation",
            "dstreams", "occupancy")
# Also accepted (not run by default): sparkscale at another utilization.target, "sparkscale-u0.9".
# The alternatives differ in headroom as much as in method: this tells one from the other.


def sparkscale_config(policy: str) -> AutoscalerConfig | None:
    """The configuration of a sparkscale policy, or None for an alternative's."""
    if policy == "sparkscale":
        return DEFAULTS
    if policy == SHORT_SCALE_DOWN:
        return replace(DEFAULTS, scale_down_interval_s=60.0)
    target = other_target(policy)
    if target is not None:
        return replace(DEFAULTS, utilization_target=target,
                       utilization_max=max(target, DEFAULTS.utilization_max))
    return None


# --------------------------------------------------------------------------------------------
# Loads


@dataclass(frozen=True)
class Load:
    """A load shape: its queries (arrival traces), how long it runs, the times of its steps."""

    name: str
    title: str
    queries: tuple[SimQuery, ...]
    duration_s: float
    steps: tuple[float, ...] = ()


def query(name: str, load: Callable[[float], float], noise: float, peak: float,
          partitions: int = PARTITIONS, initial_backlog: float = 0.0,
          read_limit_factor: float = 2.0) -> SimQuery:
    """A query of the benchmark: a Kafka-like source with a read limit of ``read_limit_factor`` x
    its peak arrivals per trigger (maxOffsetsPerTrigger), so a backlog stays in the source."""
    return SimQuery(name, load, cost_per_row=COST_PER_ROW, batch_overhead_s=BATCH_OVERHEAD_S,
                    partitions=partitions, trigger_interval_s=TRIGGER_S,
                    max_rows_per_batch=read_limit_factor * peak * TRIGGER_S, noise=noise,
                    noise_period_s=10.0, initial_backlog=initial_backlog,
                    task_overhead_s=TASK_OVERHEAD_S, executor_overhead_s=EXECUTOR_OVERHEAD_S)


def step(before: float, after: float, at: float) -> Callable[[float], float]:
    return lambda t: before if t < at else after


def loads(scale: float = 1.0) -> list[Load]:
    """The loads; ``scale`` < 1 shortens them (steps stay after a warm-up of 600 s)."""
    base = 2000.0
    at = 600.0
    steps_s = max(1200.0, 2400.0 * scale)
    day_s = max(1800.0, 7200.0 * scale)
    ramp_s = max(1200.0, 2400.0 * scale)

    def day(mean: float, amplitude: float, phase: float) -> Callable[[float], float]:
        # Starts at the trough: one compressed day from night to night.
        return lambda t: mean - amplitude * math.cos(2 * math.pi * t / day_s + phase)

    def ramp(t: float) -> float:
        # 1000 -> 16000 rows/s: the oracle passes maxExecutors at about 13000 rows/s, and 20
        # executors still keep up at 16000 (at 80 % utilization).
        return base / 2 + (7.5 * base) * min(1.0, t / ramp_s)

    return [
        Load("step-x2", "step x2 (2000 -> 4000 rows/s at 600 s)",
             (query("q", step(base, 2 * base, at), STEP_NOISE, 2 * base),), steps_s, (at,)),
        Load("step-x4", "step x4 (2000 -> 8000 rows/s at 600 s)",
             (query("q", step(base, 4 * base, at), STEP_NOISE, 4 * base),), steps_s, (at,)),
        Load("step-div4", "step /4 (8000 -> 2000 rows/s at 600 s)",
             (query("q", step(4 * base, base, at), STEP_NOISE, 4 * base),), steps_s, (at,)),
        Load("spike", "spike (2000 -> 8000 rows/s for 120 s at 600 s)",
             (query("q", lambda t: 4 * base if at <= t < at + 120.0 else base, STEP_NOISE, 4 * base),),
             steps_s, (at, at + 120.0)),
        Load("day", f"compressed day ({day_s / 3600:g} h; 3 queries share the executors, +-20 % noise)",
             (query("orders", day(3000.0, 2500.0, 0.0), DAY_NOISE, 5500.0),
              query("clicks", day(1500.0, 1000.0, 0.6), DAY_NOISE, 2500.0),
              query("audit", day(60.0, 40.0, 0.0), DAY_NOISE, 100.0, partitions=16)), day_s),
        Load("ramp", f"ramp 1000 -> 16000 rows/s over {ramp_s / 60:g} min, beyond maxExecutors "
             "(64 partitions)",
             (query("q", ramp, STEP_NOISE, 8 * base, partitions=64),), ramp_s + 600.0),
        Load("backlog", "backlog of 10 min of input waiting at start (2000 rows/s)",
             (query("q", lambda t: base, STEP_NOISE, base, initial_backlog=600.0 * base,
                    read_limit_factor=4.0),), steps_s),
    ]


# --------------------------------------------------------------------------------------------
# The oracle


def oracle_executors(queries: Sequence[SimQuery], load: Mapping[str, float],
                     cores_per_executor: int = CORES_PER_EXECUTOR,
                     utilization_target: float = UTILIZATION_TARGET,
                     max_executors: int = MAX_EXECUTORS) -> int:
    """The fewest executors on which every query keeps within ``utilization_target`` for the
    steady, noise-free ``load`` (the simulator's oracle, :func:`smallest_sufficient_executors`):
    a query whose trigger is at least a quarter of ``backlogThreshold`` within its trigger, the
    batches of one trigger starting together as Spark's aligned triggers start them; a query
    without a trigger or with a shorter one within its lag (batches back to back at most a
    quarter of ``backlogThreshold`` apart); at most ``max_executors``. This is the sizing rule of
    the autoscaler applied with the true costs: the best any policy can do."""
    return smallest_sufficient_executors(queries, load, cores_per_executor, utilization_target,
                                         max_executors, BACKLOG_THRESHOLD_S)


def oracle_at(load: Load, t: float) -> int:
    return oracle_executors(load.queries, {q.name: q.load(t) for q in load.queries})


def average_load(load: Load, samples: int = 720) -> dict[str, float]:
    times = np.linspace(0.0, load.duration_s, samples, endpoint=False)
    return {q.name: float(np.mean([q.load(float(t)) for t in times])) for q in load.queries}


def peak_executors(load: Load, samples: int = 720) -> int:
    times = np.linspace(0.0, load.duration_s, samples, endpoint=False)
    return max(oracle_at(load, float(t)) for t in times)


# --------------------------------------------------------------------------------------------
# Running one policy on one load


@dataclass
class Run:
    """One policy on one load: its timeline for :func:`figures`, the oracle, the figures."""

    load: Load
    policy: str
    timeline: Timeline
    oracle: list[int]
    figures: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0


def initial_executors(load: Load, policy: str) -> int:
    if policy == "static-peak":
        return peak_executors(load)
    if policy == "static-average":
        return oracle_executors(load.queries, average_load(load))
    return oracle_at(load, 0.0)  # the dynamic policies start sized for the load at start


@dataclass(frozen=True)
class Simulated:
    result: SimResult
    actions: list[tuple[float, int, int]]  # (time, from, to)
    failed_tasks: int


def simulate(load: Load, policy: str, seed: int = SEED) -> Simulated:
    """Run ``policy`` on ``load`` in the simulator."""
    initial = initial_executors(load, policy)
    model: ClusterModel | None = None
    if policy == "dynamic-allocation":
        model = SparkDynamicAllocation(initial_executors=initial, min_executors=1,
                                       max_executors=MAX_EXECUTORS,
                                       cores_per_executor=CORES_PER_EXECUTOR, seed=seed)
    elif policy == "dstreams":
        model = DStreamsAllocation(batch_interval_s=TRIGGER_S, min_executors=1,
                                   max_executors=MAX_EXECUTORS, seed=seed)
    elif policy == "occupancy":
        model = OccupancyRule(trigger_interval_s=TRIGGER_S, min_executors=1,
                              max_executors=MAX_EXECUTORS)
    config = sparkscale_config(policy)
    if model is None and config is None and policy not in ("static-peak", "static-average"):
        raise ValueError(f"unknown policy {policy!r}; one of {', '.join(POLICIES)} or "
                         f"{OTHER_TARGET}<utilization.target>")
    common = {"cores_per_executor": CORES_PER_EXECUTOR, "launch_commit_s": LAUNCH_COMMIT_S}
    if config is not None:
        sim = Simulation(config, load.queries, initial, PROVISIONING_DELAY_S, seed, **common)
    else:
        # The control loop runs beside, in recommend mode with nothing to recommend: the
        # simulator records the same timeline, and only the model (if any) acts.
        sim = Simulation(replace(DEFAULTS, mode="recommend"), load.queries, initial,
                         PROVISIONING_DELAY_S, seed, evaluator=NeverReadyEvaluator(),
                         on_step=model, **common)
    result = sim.run(load.duration_s)
    if model is not None:
        actions = list(model.actions)
    else:
        actions = [(a.time, a.from_executors, a.to_executors) for a in result.actions]
    return Simulated(result, actions, sim.cluster.tasks_failed)


def timeline_of(load: Load, simulated: Simulated) -> Timeline:
    """The run as a :class:`Timeline`: a sample per control tick (live executors, total
    noise-free load, lag = the worst query's age of the oldest row no completed batch has read:
    what waits in the source and what the running batch reads)."""
    t, executors, total, lag = [], [], [], []
    for p in simulated.result.timeline:
        t.append(p.t)
        executors.append(float(p.executors))
        total.append(sum(q.load(p.t) for q in load.queries))
        lag.append(max(qp.lag_s for qp in p.queries.values()))
    return Timeline(t, executors, total, lag, simulated.actions, simulated.failed_tasks)


def run(load: Load, policy: str, seed: int = SEED) -> Run:
    started = time.monotonic()
    timeline = timeline_of(load, simulate(load, policy, seed))
    oracle = [oracle_at(load, x) for x in timeline.t]
    figs = figures(timeline, oracle, BACKLOG_THRESHOLD_S, SCALE_DOWN_INTERVAL_S, load.steps)
    return Run(load, policy, timeline, oracle, figs, time.monotonic() - started)


# --------------------------------------------------------------------------------------------
# Output


def _fmt(value: float, pattern: str) -> str:
    return "n/a" if value is None or math.isnan(value) else pattern.format(value)


COLUMNS = ("load", "policy", "executor-s / oracle", "executor-s / static-peak", "lag > threshold",
           "lag p99 (s)", "max lag (s)", "actions", "flaps", "actions to converge", "time to converge (s)",
           "failed tasks", "mean executors")


def table_rows(runs: Sequence[Run]) -> list[list[str]]:
    """One row per run; ``executor-s / static-peak`` against the static-peak run of its load."""
    peak = {r.load.name: r.figures["executor_s"] for r in runs if r.policy == "static-peak"}
    rows = []
    for r in runs:
        f = r.figures
        versus_peak = f["executor_s"] / peak[r.load.name] if r.load.name in peak else math.nan
        steps = int(f["steps"])
        converge = time_to = "-"
        if steps:
            per_step = [_fmt(f[f"step_{i}_actions"], "{:.0f}") for i in range(steps)]
            times = [_fmt(f[f"step_{i}_time_to_converge_s"], "{:.0f}") for i in range(steps)]
            converge, time_to = " / ".join(per_step), " / ".join(times)
        rows.append([r.load.name, r.policy, _fmt(f["executor_s_vs_oracle"], "{:.2f}"),
                     _fmt(versus_peak, "{:.2f}"), _fmt(100 * f["lag_over_threshold_share"], "{:.1f} %"),
                     _fmt(f["lag_p99_s"], "{:.0f}"), _fmt(f["max_lag_s"], "{:.0f}"), f"{f['actions']:.0f}",
                     f"{f['flaps']:.0f}",
                     converge, time_to, f"{f['failed_tasks']:.0f}", _fmt(f["mean_executors"], "{:.1f}")])
    return rows


def markdown(runs: Sequence[Run], command: str, wall_s: float) -> str:
    rows = table_rows(runs)
    titles = {}
    for r in runs:
        titles.setdefault(r.load.name, r.load.title)
    lines = [
        "# Decision quality in the simulator", "",
        f"Generated by `{command}` in {wall_s:.0f} s (deterministic: seed {SEED}).", "",
        f"Cluster: executors of {CORES_PER_EXECUTOR} cores, at most {MAX_EXECUTORS}, provisioning "
        f"{PROVISIONING_DELAY_S:g} s (a launch is committed after {LAUNCH_COMMIT_S:g} s). Queries: "
        f"{TRIGGER_S:g} s trigger, {PARTITIONS} partitions, {COST_PER_ROW * 1000:g} ms of task time per "
        f"row, {BATCH_OVERHEAD_S:g} s of driver time per batch, and a fixed task time per batch of "
        f"{TASK_OVERHEAD_S:g} s per task + {EXECUTOR_OVERHEAD_S:g} s per executor its tasks land on; "
        "a read limit of twice the peak arrivals per trigger (four times for the backlog load). "
        f"Arrivals carry +-{STEP_NOISE * 100:g} % noise (the day: +-{DAY_NOISE * 100:g} %), held 10 s.",
        "",
        f"Oracle: the fewest executors on which the noise-free load keeps utilization at "
        f"{UTILIZATION_TARGET:g}, fixed costs included, at most maxExecutors: a batch of a period's "
        f"arrivals over {UTILIZATION_TARGET:g} ends within the period, the trigger or, back to back, a "
        f"quarter of backlogThreshold ({BACKLOG_THRESHOLD_S / 4:g} s) where that is longer. Lag: the "
        "worst query's age of the oldest row no completed batch has read (waiting in the source or "
        f"read by the running batch); threshold {BACKLOG_THRESHOLD_S:g} s (backlogThreshold); p99: "
        "exceeded 1 % of the time. Flaps: opposite actions less than "
        f"{SCALE_DOWN_INTERVAL_S:g} s apart (scaleDownInterval). Converge: actions and seconds from "
        "each step until the live executors stay within 1 of the oracle (per step, `/`-separated; "
        "n/a: not within 1 by the next step or the end). For the backlog load the oracle leaves "
        "out catching up, so a policy that works the backlog off shows above 1.", "",
        "Loads: " + "; ".join(f"**{name}**: {title}" for name, title in titles.items()) + ".", "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    lines += ["", "## Targets", "", *target_lines(runs)]
    lines += [
        "", "Policies: **sparkscale** with its defaults (maxExecutors as above); **sparkscale-60s**: "
        "the same with `scaleDownInterval=60s`; **static-peak** / "
        "**static-average**: the oracle at the peak / at the average load, fixed; "
        "**dynamic-allocation**: Spark's `ExecutorAllocationManager` (1 s backlog timeouts, 60 s idle "
        "timeout, ratio 1.0); **dstreams**: the DStreams rule (`scalingInterval` 60 s, up at 0.9, "
        "down at 0.3); **occupancy**: every 60 s, `ceil(executors x batch time / trigger)` when "
        "outside [0.5, 1.0]. Actions of dynamic allocation are its rounds of adding executors and "
        "its idle removals; it also lowers its target between micro-batches (no task pending or "
        "running), which withdraws launches not committed yet and is not counted."
        + (f" **{OTHER_TARGET}X**: sparkscale with `utilization.target=X`."
           if any(r.policy.startswith(OTHER_TARGET) for r in runs) else ""),
    ]
    return "\n".join(lines) + "\n"


def target_lines(runs: Sequence[Run], policy: str = "sparkscale") -> list[str]:
    """The simulator's targets, each with its figures and met / missed: better than the occupancy
    rule on every load (executor-seconds at equal or lower lag), the compressed day at most 1.10x
    the oracle, the /4 step converged within scaleDownInterval + 2 metric windows."""
    by = {(r.load.name, r.policy): r.figures for r in runs}
    out = []
    for name in dict.fromkeys(r.load.name for r in runs):
        mine, rule = by.get((name, policy)), by.get((name, "occupancy"))
        if mine is None or rule is None:
            continue
        cost = mine["executor_s"] / rule["executor_s"]
        lag, rule_lag = mine["lag_over_threshold_share"], rule["lag_over_threshold_share"]
        cheaper, calmer = cost <= 1.0 + 1e-9, (lag, mine["max_lag_s"]) <= (rule_lag, rule["max_lag_s"])
        verdict = ("met" if cheaper and calmer else "missed" if not cheaper and not calmer
                   else "trade-off: " + ("cheaper, more lag" if cheaper else "less lag, costlier"))
        out.append(f"- {name}: {policy} vs occupancy: executor-s {cost:.2f}x, lag > threshold "
                   f"{100 * lag:.1f} % vs {100 * rule_lag:.1f} %, max lag {mine['max_lag_s']:.0f} s vs "
                   f"{rule['max_lag_s']:.0f} s: **{verdict}**")
    day = by.get(("day", policy))
    if day is not None:
        ok = day["executor_s_vs_oracle"] <= 1.10
        out.append(f"- day: {day['executor_s_vs_oracle']:.2f}x the oracle (target at most 1.10x): "
                   f"**{'met' if ok else 'missed'}**")
    div4 = by.get(("step-div4", policy))
    if div4 is not None:
        limit = DEFAULTS.scale_down_interval_s + 2 * DEFAULTS.metrics_window_s
        took = div4.get("step_0_time_to_converge_s", math.nan)
        ok = not math.isnan(took) and took <= limit
        out.append(f"- step-div4: converged in {_fmt(took, '{:.0f}')} s (target at most scaleDownInterval + "
                   f"2 windows = {limit:g} s): **{'met' if ok else 'missed'}**")
    return out


COLORS = {"sparkscale": "tab:blue", "sparkscale-60s": "tab:cyan", "static-peak": "tab:gray",
          "static-average": "tab:brown", "dynamic-allocation": "tab:orange", "dstreams": "tab:purple",
          "occupancy": "tab:green"}


def _save(fig: object, path: Path) -> None:
    # 100 dpi with 9-11 pt text: legible where a page shows the picture at its own width.
    fig.savefig(path, dpi=100, bbox_inches="tight", pil_kwargs={"optimize": True})  # type: ignore[attr-defined]


def plot_load(runs: Sequence[Run], path: Path) -> None:
    """Executors (with the oracle) and lag against load over time, a panel per policy."""
    import matplotlib  # lazily: the benchmark's numbers need no plotting library

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 2
    rows = math.ceil(len(runs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(11, 2.6 * rows), sharex=True, squeeze=False)
    top = max(max(max(r.timeline.executors), max(r.oracle)) for r in runs) + 1
    lag_top = max(max(r.timeline.lag_s) for r in runs) * 1.1 + 1
    for ax, r in zip(axes.flat, runs, strict=False):
        t = np.asarray(r.timeline.t) / 60.0
        load = np.asarray(r.timeline.load)
        ax.fill_between(t, load / load.max() * top * 0.95, step="post", color="0.88", lw=0,
                        label="load (scaled)")
        ax.step(t, r.oracle, where="post", color="0.35", ls="--", lw=1, label="oracle")
        ax.step(t, r.timeline.executors, where="post", color=COLORS.get(r.policy, "tab:blue"), lw=1.6,
                label="executors")
        ax.set_ylim(0, top)
        ax.set_title(f"{r.policy}: {r.figures['executor_s_vs_oracle']:.2f}x oracle, "
                     f"max lag {r.figures['max_lag_s']:.0f} s", fontsize=10)
        ax.set_ylabel("executors", fontsize=9)
        lag_ax = ax.twinx()
        lag_ax.plot(t, r.timeline.lag_s, color="tab:red", lw=0.8, label="lag (s)")
        lag_ax.axhline(BACKLOG_THRESHOLD_S, color="tab:red", lw=0.5, ls=":")
        lag_ax.set_ylim(0, lag_top)
        lag_ax.tick_params(labelsize=8, colors="tab:red")
        ax.tick_params(labelsize=8)
    for ax in axes.flat[len(runs):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("minutes", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend([*handles, plt.Line2D([], [], color="tab:red", lw=0.8)], [*labels, "lag (s, right)"],
               loc="upper center", bbox_to_anchor=(0.5, 0.965), ncol=4, fontsize=9, frameon=False)
    fig.suptitle(runs[0].load.title, fontsize=11, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    _save(fig, path)
    plt.close(fig)


def plot_day(runs: Sequence[Run], path: Path,
             policies: Sequence[str] = ("sparkscale", "static-peak", "dynamic-allocation")) -> None:
    """The README's picture: the compressed day's load, and the executors of a few policies."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [r for p in policies for r in runs if r.policy == p]
    if not chosen:
        return
    fig, (load_ax, ax) = plt.subplots(2, 1, figsize=(8, 5), sharex=True,
                                      gridspec_kw={"height_ratios": [1, 2]})
    first = chosen[0]
    t = np.asarray(first.timeline.t) / 60.0
    load_ax.fill_between(t, first.timeline.load, step="post", color="0.8", lw=0)
    load_ax.set_ylabel("rows/s", fontsize=9)
    load_ax.set_title(f"{first.load.title}", fontsize=11)
    ax.step(t, first.oracle, where="post", color="0.3", ls="--", lw=1, label="oracle")
    for r in chosen:
        f = r.figures
        ax.step(np.asarray(r.timeline.t) / 60.0, r.timeline.executors, where="post",
                color=COLORS.get(r.policy, "tab:blue"), lw=1.5,
                label=f"{r.policy}: {f['executor_s_vs_oracle']:.2f}x oracle, "
                      f"lag > {BACKLOG_THRESHOLD_S:g} s {100 * f['lag_over_threshold_share']:.1f} %")
    ax.set_ylabel("executors", fontsize=9)
    ax.set_xlabel("minutes", fontsize=9)
    # Below the plot, off the lines.
    ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2, frameon=False)
    for a in (load_ax, ax):
        a.tick_params(labelsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Main


def run_all(selected_loads: Sequence[Load], policies: Sequence[str] = POLICIES,
            progress: bool = False) -> list[Run]:
    runs = []
    for load in selected_loads:
        for policy in policies:
            r = run(load, policy)
            runs.append(r)
            if progress:
                print(f"{load.name:<10} {policy:<19} {r.wall_s:5.1f}s  "
                      f"{r.figures['executor_s_vs_oracle']:.2f}x oracle", flush=True)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two loads, shortened: a smoke run")
    parser.add_argument("--loads", help="comma-separated load names (default: all)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help=f"comma-separated policies; also {OTHER_TARGET}<target> (e.g. sparkscale-u0.9): "
                             "sparkscale at another utilization.target")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the table and plots")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNGs (no matplotlib)")
    parser.add_argument("--no-matrix", action="store_true",
                        help="skip the scenario matrix (benchmarks/scenario_matrix.py, results/matrix.md)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    selected = loads(0.25 if args.quick else 1.0)
    if args.quick:
        selected = [ld for ld in selected if ld.name in ("step-x4", "day")]
    if args.loads:
        names = args.loads.split(",")
        selected = [ld for ld in selected if ld.name in names]
    policies = [p for p in args.policies.split(",") if p]
    runs = run_all(selected, policies, progress=True)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/bench_decisions.py" + (" --quick" if args.quick else "") + "".join(
        f" --{name} {value}" for name, value in (("loads", args.loads), ("policies", args.policies))
        if value and value != parser.get_default(name))
    text = markdown(runs, command, time.monotonic() - started)
    (args.out / "decisions.md").write_text(text)
    print(text)
    if not args.no_plots:
        for load in selected:
            of_load = [r for r in runs if r.load.name == load.name]
            plot_load(of_load, args.out / f"decisions-{load.name}.png")
            if load.name == "day":
                plot_day(of_load, args.out / "day.png")
    print(f"wrote {args.out}/decisions.md and plots in {time.monotonic() - started:.0f} s")
    if not args.no_matrix:
        return scenario_matrix.main(["--out", str(args.out), *(["--quick"] if args.quick else [])])
    return 0


if __name__ == "__main__":
    sys.exit(main())
