"""The scenario matrix: sparkscale's decisions on shapes it was not tuned on, in the simulator.

Each scenario is one combination of what a query can be (its source with or without a backlog, a
read limit that binds where the source hides it, no trigger or a short, default or long one,
stateless or stateful) and of a load shape (steady, step, ramp, spike, a recurring day, an idle
stretch), with one query or several sharing the executors. Each runs with sparkscale's defaults
over several seeds of the arrivals' noise; the figures are those of :mod:`figures` against the
oracle (:func:`~sparkscale_listener.sim.smallest_sufficient_executors` with
``backlogThreshold``: the rule sparkscale sizes by, with the true costs).

Run with the policy table by ``make bench-decisions`` (``benchmarks/bench_decisions.py``), alone by
``python benchmarks/scenario_matrix.py [--quick] [--scenarios a,b]``; writes
``benchmarks/results/matrix.md``. A change to the decisions is judged on the whole matrix, before and
after: a fix for one shape that moves another is a regression until explained.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.figures import Timeline, figures
from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.sim import SimQuery, Simulation, smallest_sufficient_executors

RESULTS = Path(__file__).resolve().parent / "results"
SEEDS = (1, 2, 3)
PROVISIONING_DELAY_S = 30.0
LAUNCH_COMMIT_S = 2.0
NOISE = 0.05
DAY_NOISE = 0.2
ROWS_PER_FILE = 200.0
JITTER = 0.1  # each batch's driver time varies this much, as planning and commits do on a real driver

Load = Callable[[float], float]


# -- what a query is ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """A query's costs, source and trigger, apart from its load.

    ``source``: ``backlog`` (Kafka-like: reports what waits, a read limit of ``limit_factor`` x its
    peak over a batch period), ``files`` (files of :data:`ROWS_PER_FILE` rows, no backlog reported,
    at most ``files_per_batch`` files a batch: a limit that hides what waits behind it), ``rate``
    (no backlog, no limit: every batch reads all that arrived)."""

    state: str  # "stateless" or "stateful"
    source: str  # "backlog", "files" or "rate"
    trigger_s: float | None
    cost_per_row: float = 0.0
    files_per_batch: int = 6
    limit_factor: float = 2.0

    @property
    def label(self) -> str:
        trigger = "none" if not self.trigger_s else f"{self.trigger_s:g}s"
        return f"{self.source} {trigger} {self.state}"


# Stateless: a map over 32 partitions (the decision benchmark's query). Stateful: a shuffle into 8
# state-store partitions and a sink commit: more driver time and a fixed cost per task (each opens
# its state store) that no executor count shortens much.
COSTS = {
    "stateless": {"cost_per_row": 0.002, "partitions": 32, "batch_overhead_s": 0.5,
                  "task_overhead_s": 0.05, "executor_overhead_s": 0.1},
    "stateful": {"cost_per_row": 0.004, "partitions": 8, "batch_overhead_s": 1.5,
                 "task_overhead_s": 0.15, "executor_overhead_s": 0.2},
}


def make_query(name: str, kind: Kind, load: Load, peak: float, noise: float = NOISE,
               **overrides: float) -> SimQuery:
    costs: dict[str, float] = {**COSTS[kind.state]}
    if kind.cost_per_row:
        costs["cost_per_row"] = kind.cost_per_row
    costs.update(overrides)
    limit: float | None = None
    if kind.source == "backlog":
        limit = kind.limit_factor * peak * max(kind.trigger_s or 0.0, 10.0)
    elif kind.source == "files":
        limit = kind.files_per_batch * ROWS_PER_FILE
    return SimQuery(name, load, trigger_interval_s=kind.trigger_s, max_rows_per_batch=limit, noise=noise,
                    noise_period_s=10.0, reports_backlog=kind.source == "backlog", batch_jitter=JITTER,
                    rows_per_file=ROWS_PER_FILE if kind.source == "files" else None,
                    partitions=int(costs.pop("partitions")), **costs)


# -- load shapes -------------------------------------------------------------------------------


def steady(rate: float) -> Load:
    return lambda t: rate


def step(before: float, after: float, at: float) -> Load:
    return lambda t: before if t < at else after


def ramp(start: float, end: float, begin: float, over: float) -> Load:
    return lambda t: start + (end - start) * min(1.0, max(0.0, (t - begin) / over))


def spike(base: float, peak: float, at: float, length: float) -> Load:
    return lambda t: peak if at <= t < at + length else base


def day(low: float, high: float, period: float) -> Load:
    """From the trough, ``period`` seconds a day: recurring."""
    mean, amplitude = (low + high) / 2, (high - low) / 2
    return lambda t: mean - amplitude * math.cos(2 * math.pi * t / period)


def phases(*parts: tuple[float, float]) -> Load:
    """(until, rate) pairs: ``rate`` up to ``until`` seconds, then the next."""
    def load(t: float) -> float:
        for until, rate in parts:
            if t < until:
                return rate
        return parts[-1][1]
    return load


# -- scenarios ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Phase:
    """A stretch of a scenario whose executors are reported apart (from ``start`` + 3 minutes,
    time to converge, to ``end``)."""

    name: str
    start: float
    end: float


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    queries: tuple[SimQuery, ...]
    duration_s: float
    steps: tuple[float, ...] = ()
    idle_from: float | None = None  # the load stops here: how soon are the executors given back?
    phases: tuple[Phase, ...] = ()
    cores: int = 2
    max_executors: int = 20
    # Targets the scenario is held to (beside its figures): lag p99 at most half of
    # backlogThreshold, executor-seconds at most this much over the oracle.
    steady: bool = False
    max_vs_oracle: float | None = None

    def config(self) -> AutoscalerConfig:
        return AutoscalerConfig(max_executors=self.max_executors)


def scenarios(scale: float = 1.0) -> list[Scenario]:
    """The matrix; ``scale`` < 1 shortens the runs (a smoke run)."""
    m = max(scale, 0.25)
    minutes = 60.0 * m

    def k(state: str, source: str, trigger: float | None, **kw: float) -> Kind:
        return Kind(state, source, trigger, **kw)  # type: ignore[arg-type]

    files_1s = k("stateful", "files", 1.0, cost_per_row=0.003)
    q, e = 15 * minutes, 30 * minutes  # the file scenario's phases: quiet, heavy, moderate, none
    day_s = 3600.0 * m
    return [
        Scenario("steady", "backlog source, 10 s trigger, stateless: 3,000 rows/s",
                 (make_query("q", k("stateless", "backlog", 10.0), steady(3000.0), 3000.0),), 40 * minutes,
                 steady=True, max_vs_oracle=1.15),
        Scenario("step-up", "backlog, 10 s, stateless: 2,000 -> 8,000 rows/s",
                 (make_query("q", k("stateless", "backlog", 10.0), step(2000.0, 8000.0, 10 * minutes),
                             8000.0),), 40 * minutes, steps=(10 * minutes,)),
        Scenario("step-down-1s", "backlog, 1 s, stateless: 8,000 -> 2,000 rows/s",
                 (make_query("q", k("stateless", "backlog", 1.0), step(8000.0, 2000.0, 10 * minutes),
                             8000.0),), 40 * minutes, steps=(10 * minutes,)),
        Scenario("day-none", "backlog, no trigger, stateless: a day of 500 -> 4,000 rows/s, twice",
                 (make_query("q", k("stateless", "backlog", None), day(500.0, 4000.0, day_s), 4000.0,
                             DAY_NOISE),), 2 * day_s, steady=True, max_vs_oracle=1.15),
        Scenario("day-5min", "backlog, 5 min trigger, stateless: a day of 500 -> 4,000 rows/s, twice",
                 (make_query("q", k("stateless", "backlog", 300.0), day(500.0, 4000.0, day_s), 4000.0,
                             DAY_NOISE),), 2 * day_s),
        Scenario("spike-1s-stateful", "backlog, 1 s, stateful: 400 rows/s, 1,600 for 2 min",
                 (make_query("q", k("stateful", "backlog", 1.0), spike(400.0, 1600.0, 15 * minutes, 120.0),
                             1600.0),), 40 * minutes, steps=(15 * minutes, 15 * minutes + 120.0)),
        Scenario("files-phases", "files (6 a batch at most, no backlog), 1 s, stateful, 1-core executors "
                 "(at most 4): 60, 250, 160 rows/s, then none",
                 (make_query("q", files_1s, phases((q, 60.0), (2 * q, 250.0), (e, 160.0), (math.inf, 0.0)),
                             250.0),), e + 15 * minutes, steps=(q, 2 * q), idle_from=e,
                 phases=(Phase("quiet", 0.0, q), Phase("heavy", q, 2 * q), Phase("moderate", 2 * q, e)),
                 cores=1, max_executors=4),
        Scenario("files-quiet", "files, 1 s, stateful, 1-core executors (at most 4): a steady 60 rows/s",
                 (make_query("q", files_1s, steady(60.0), 60.0),), 30 * minutes, cores=1, max_executors=4,
                 steady=True, max_vs_oracle=1.15),
        Scenario("rate-step-1s", "no backlog, no limit, 1 s, stateless: 1,000 -> 4,000 rows/s",
                 (make_query("q", k("stateless", "rate", 1.0), step(1000.0, 4000.0, 10 * minutes), 4000.0),),
                 40 * minutes, steps=(10 * minutes,)),
        Scenario("ramp-none-stateful", "no backlog, no trigger, stateful: 200 -> 1,400 rows/s over 30 min",
                 (make_query("q", k("stateful", "rate", None), ramp(200.0, 1400.0, 5 * minutes, 30 * minutes),
                             1400.0),), 45 * minutes),
        Scenario("idle-10s", "backlog, 10 s, stateless: 3,000 rows/s, then none",
                 (make_query("q", k("stateless", "backlog", 10.0), phases((15 * minutes, 3000.0),
                                                                           (math.inf, 0.0)), 3000.0),),
                 35 * minutes, idle_from=15 * minutes),
        Scenario("idle-files-none", "files, no trigger, stateless: 1,000 rows/s, then none",
                 (make_query("q", k("stateless", "files", None, files_per_batch=50),
                             phases((15 * minutes, 1000.0), (math.inf, 0.0)), 1000.0),),
                 35 * minutes, idle_from=15 * minutes),
        Scenario("two-day-none", "two queries, no trigger, 4-core executors (at most 30): a day of 200 -> "
                 "2,000 rows/s (4 ms a row, 64 partitions, +-20 %, a read limit of 200,000 rows) beside a "
                 "steady 300 rows/s (10 ms a row) with a x5 spike of 10 min",
                 (SimQuery("diurnal", day(200.0, 2000.0, 4 * day_s), cost_per_row=0.004, partitions=64,
                           noise=DAY_NOISE, max_rows_per_batch=200_000, batch_jitter=JITTER),
                  SimQuery("steady", spike(300.0, 1500.0, 2 * day_s, 600.0 * m), cost_per_row=0.010,
                           partitions=64, noise=NOISE, batch_jitter=JITTER)),
                 4 * day_s, cores=4, max_executors=30, steady=True, max_vs_oracle=1.15),
        Scenario("mixed-step", "two queries: files at 1 s, stateful, 300 rows/s, beside a backlog source at "
                 "10 s, stateless, 2,000 -> 6,000 rows/s",
                 (make_query("files", k("stateful", "files", 1.0, files_per_batch=20), steady(300.0), 300.0),
                  make_query("kafka", k("stateless", "backlog", 10.0), step(2000.0, 6000.0, 15 * minutes),
                             6000.0)), 40 * minutes, steps=(15 * minutes,)),
        Scenario("steady-5min-stateful", "no backlog, 5 min trigger, stateful: 500 rows/s",
                 (make_query("q", k("stateful", "rate", 300.0), steady(500.0), 500.0),), 60 * minutes,
                 steady=True, max_vs_oracle=1.15),
        Scenario("step-none-stateful", "backlog, no trigger, stateful: 400 -> 1,200 rows/s",
                 (make_query("q", k("stateful", "backlog", None), step(400.0, 1200.0, 10 * minutes),
                             1200.0),),
                 40 * minutes, steps=(10 * minutes,)),
    ]


# -- running -----------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One scenario over the seeds: each seed's figures, and the executors of each phase."""

    scenario: Scenario
    figures: list[dict[str, float]] = field(default_factory=list)
    phase_executors: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # (live, oracle)
    released_s: list[float] = field(default_factory=list)  # idle_from -> minExecutors
    wall_s: float = 0.0


def oracle(scenario: Scenario, t: float) -> int:
    cfg = scenario.config()
    return smallest_sufficient_executors(scenario.queries, {q.name: q.load(t) for q in scenario.queries},
                                         scenario.cores, cfg.utilization_target, scenario.max_executors,
                                         cfg.backlog_threshold_s)


def run(scenario: Scenario, seeds: Sequence[int] = SEEDS) -> Outcome:
    started = time.monotonic()
    cfg = scenario.config()
    out = Outcome(scenario)
    initial = oracle(scenario, 0.0)
    for seed in seeds:
        sim = Simulation(cfg, scenario.queries, initial, PROVISIONING_DELAY_S, seed,
                         cores_per_executor=scenario.cores, launch_commit_s=LAUNCH_COMMIT_S)
        result = sim.run(scenario.duration_s)
        points = result.timeline
        t = [p.t for p in points]
        live = [float(p.executors) for p in points]
        best = [oracle(scenario, x) for x in t]
        timeline = Timeline(t, live, [sum(q.load(x) for q in scenario.queries) for x in t],
                            [max(qp.lag_s for qp in p.queries.values()) for p in points],
                            [(a.time, a.from_executors, a.to_executors) for a in result.actions],
                            sim.cluster.tasks_failed)
        out.figures.append(figures(timeline, best, cfg.backlog_threshold_s, cfg.scale_down_interval_s,
                                   scenario.steps))
        for phase in scenario.phases:
            inside = [i for i, x in enumerate(t) if phase.start + 180.0 <= x < phase.end]
            if inside:
                out.phase_executors.setdefault(phase.name, []).append(
                    (statistics.fmean(live[i] for i in inside), statistics.fmean(best[i] for i in inside)))
        if scenario.idle_from is not None:
            at_min = [x for x, n in zip(t, live, strict=True)
                      if x >= scenario.idle_from and n <= cfg.min_executors]
            out.released_s.append(at_min[0] - scenario.idle_from if at_min else math.nan)
    out.wall_s = time.monotonic() - started
    return out


# -- reporting ---------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return statistics.fmean(finite) if finite else math.nan


def _range(values: Sequence[float], pattern: str) -> str:
    lo, hi = min(values), max(values)
    return pattern.format(lo) if math.isclose(lo, hi, rel_tol=0.005) else \
        f"{pattern.format(lo)}-{pattern.format(hi)}"


COLUMNS = ("scenario", "executor-s / oracle", "lag p99 (s)", "max lag (s)", "lag > threshold / 2",
           "lag > threshold", "actions", "flaps", "idle to min (s)")


def row(o: Outcome) -> list[str]:
    f = o.figures
    never = [x if not math.isnan(x) else math.inf for x in o.released_s]
    released = _range(never, "{:.0f}") if never else "-"
    return [o.scenario.name, _range([x["executor_s_vs_oracle"] for x in f], "{:.2f}"),
            _range([x["lag_p99_s"] for x in f], "{:.0f}"), _range([x["max_lag_s"] for x in f], "{:.0f}"),
            f"{100 * _mean([x['lag_over_half_share'] for x in f]):.1f} %",
            f"{100 * _mean([x['lag_over_threshold_share'] for x in f]):.1f} %",
            _range([x["actions"] for x in f], "{:.0f}"), f"{sum(x['flaps'] for x in f):.0f}", released]


def target_lines(outcomes: Sequence[Outcome]) -> list[str]:
    """The targets each scenario is held to, met or missed, with their figures."""
    lines = []
    for o in outcomes:
        s, cfg = o.scenario, o.scenario.config()
        # Rows wait a trigger interval by the user's choice, and the batch that reads them.
        longest = max((q.trigger_interval_s or 0.0) for q in s.queries)
        bound = max(cfg.backlog_threshold_s / 2, 2 * longest)
        if s.steady:
            worst = max(x["lag_p99_s"] for x in o.figures)
            why = ("half of backlogThreshold" if bound == cfg.backlog_threshold_s / 2
                   else "two trigger intervals")
            lines.append(f"- {s.name}: lag p99 at most {bound:g} s ({why}), worst seed "
                         f"{worst:.0f} s: **{'met' if worst <= bound else 'missed'}**")
        if s.max_vs_oracle is not None:
            worst = max(x["executor_s_vs_oracle"] for x in o.figures)
            lines.append(f"- {s.name}: at most {s.max_vs_oracle:.2f}x the oracle, worst seed {worst:.2f}x: "
                         f"**{'met' if worst <= s.max_vs_oracle + 1e-9 else 'missed'}**")
        flaps = sum(x["flaps"] for x in o.figures)
        if flaps:
            lines.append(f"- {s.name}: {flaps:.0f} flaps over {len(o.figures)} seeds: **missed** (target 0)")
        if s.idle_from is not None:
            limit = cfg.scale_down_interval_s + 2 * cfg.metrics_window_s + 2 * cfg.interval_s
            worst = max(x if not math.isnan(x) else math.inf for x in o.released_s)
            lines.append(f"- {s.name}: executors given back within scaleDownInterval + 2 windows (+ 2 ticks) "
                         f"= {limit:g} s of the load stopping, worst seed {worst:.0f} s: "
                         f"**{'met' if worst <= limit else 'missed'}**")
        for name, pairs in o.phase_executors.items():
            live = [p[0] for p in pairs]
            best = [p[1] for p in pairs]
            worst = max(a - b for a, b in pairs)
            lines.append(f"- {s.name}, {name} phase: {_range(live, '{:.1f}')} executors on average, oracle "
                         f"{_range(best, '{:.1f}')}: at most one above it "
                         f"**{'met' if worst <= 1.0 + 1e-9 else 'missed'}**")
    return lines


def markdown(outcomes: Sequence[Outcome], command: str, wall_s: float, seeds: Sequence[int]) -> str:
    cfg = AutoscalerConfig()
    lines = [
        "# Scenario matrix: decisions on shapes they were not tuned on", "",
        f"Generated by `{command}` in {wall_s:.0f} s (simulator, seeds {', '.join(map(str, seeds))}; "
        "ranges are over the seeds).", "",
        "sparkscale with its defaults (maxExecutors as each scenario says; 2-core executors unless it "
        f"says otherwise), executors provisioned in {PROVISIONING_DELAY_S:g} s. Queries: **stateless** "
        "2 ms a row over 32 partitions, 0.5 s on the driver and 0.05 s per task + 0.1 s per executor of "
        "fixed task time a batch (the driver's time varies +-10 % from batch to batch); **stateful** "
        "4 ms a row (3 ms for the file scenarios) over 8 "
        "partitions, 1.5 s on the driver, 0.15 s per task + 0.2 s per executor (each task opens its "
        "state store). Sources: **backlog** reports what waits (Kafka-like), with a read limit of twice "
        "the peak over a batch period; **files** report nothing, and come in files of "
        f"{ROWS_PER_FILE:g} rows with a limit of files per batch (6 unless said), which hides what "
        "waits behind it; **rate** reports nothing and has no limit. Noise: +-5 % held 10 s (days "
        "+-20 %).", "",
        "Oracle: the fewest executors keeping the noise-free load at utilization.target with the true "
        "costs, within the trigger where it is at least a quarter of backlogThreshold, else within "
        f"that quarter ({cfg.backlog_threshold_s / 4:g} s) back to back. Lag: the age of the oldest row "
        "no completed batch has read, the worst query's; p99 is exceeded 1 % of the time; threshold "
        f"{cfg.backlog_threshold_s:g} s. Flaps: opposite actions closer than scaleDownInterval "
        f"({cfg.scale_down_interval_s:g} s). Idle to min: seconds from the load stopping until "
        "minExecutors.", "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *("| " + " | ".join(row(o)) + " |" for o in outcomes),
        "", "Scenarios: " + "; ".join(f"**{o.scenario.name}**: {o.scenario.title}" for o in outcomes) + ".",
        "", "## Targets", "", *target_lines(outcomes),
    ]
    return "\n".join(lines) + "\n"


def run_matrix(selected: Sequence[Scenario], seeds: Sequence[int] = SEEDS,
               progress: bool = False) -> list[Outcome]:
    outcomes = []
    for scenario in selected:
        o = run(scenario, seeds)
        outcomes.append(o)
        if progress:
            r = row(o)
            print(f"{scenario.name:<22} {o.wall_s:5.1f}s  {r[1]}x oracle, lag p99 {r[2]} s, max {r[3]} s, "
                  f"actions {r[6]}, flaps {r[7]}", flush=True)
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shortened runs, one seed: a smoke run")
    parser.add_argument("--scenarios", help="comma-separated scenario names (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for matrix.md")
    args = parser.parse_args(argv)
    started = time.monotonic()
    selected = scenarios(0.25 if args.quick else 1.0)
    if args.scenarios:
        names = args.scenarios.split(",")
        unknown = sorted(set(names) - {s.name for s in selected})
        if unknown:
            parser.error(f"unknown scenarios {', '.join(unknown)}; "
                         f"one of {', '.join(s.name for s in selected)}")
        selected = [s for s in selected if s.name in names]
    seeds = SEEDS[:1] if args.quick else SEEDS
    outcomes = run_matrix(selected, seeds, progress=True)
    command = "python benchmarks/scenario_matrix.py" + (" --quick" if args.quick else "") + (
        f" --scenarios {args.scenarios}" if args.scenarios else "")
    text = markdown(outcomes, command, time.monotonic() - started, seeds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "matrix.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
