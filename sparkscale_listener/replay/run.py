"""Replaying a recorded application with any settings: the real control loop on its history.

:func:`replay` builds one simulated query per recorded query from :mod:`.history` (its arrivals,
its fitted cost, each batch's deviation from it) and runs the real
:class:`~sparkscale_listener.control_loop.Autoscaler` (collector, checkers, evaluator, policy,
realizer) over it in :class:`~sparkscale_listener.sim.Simulation`, on executors of the
recorded size with the provisioning time the log shows. Settings: the recorded run's
``spark.sparkscale.*`` keys overridden by the given ones, validated as at startup.
:func:`compare` runs several settings on one history. :class:`Agreement` measures how well a replay
with the recorded settings reproduces the recorded decisions.

The simulated clock is the log's epoch time less a whole number of days (and trigger intervals),
so triggers fire on the same instants as Spark's and excluded periods keep their time of day.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ..config.core import AutoscalerConfig
from ..config.options import PREFIX
from ..sim import SimQuery, Simulation
from .history import Action, ApplicationHistory, QueryHistory, build_history, flaps
from .records import RecordedApplication

# The simulator's step: slots are shared out per step, so a batch that starts inside a step waits
# for the next one to run its tasks. A tenth of the shortest trigger interval (steps aligned with
# the triggers), within these bounds.
MAX_STEP_S, MIN_STEP_S = 1.0, 0.05
MAX_SAMPLES = 5000  # of the recorded run's series


@dataclass(frozen=True)
class Series:
    """A run over time, sampled at the control ticks: live executors, the total arrival rate and
    the lag: how long the oldest row no completed batch had read had waited, seconds, the worst
    query's (the simulator's :attr:`~..sim.QueryPoint.lag_s`, :meth:`.QueryHistory.lag`)."""

    t: tuple[float, ...]  # epoch seconds
    executors: tuple[float, ...]
    load: tuple[float, ...]
    lag_s: tuple[float, ...]

    @property
    def max_lag_s(self) -> float:
        return max(self.lag_s, default=0.0)

    @property
    def mean_lag_s(self) -> float:
        """Over time: each sample holds until the next (the last one for the interval before it)."""
        if len(self.t) < 2:
            return self.lag_s[0] if self.lag_s else 0.0
        weights = [b - a for a, b in itertools.pairwise(self.t)]
        weights.append(weights[-1])
        return sum(w * x for w, x in zip(weights, self.lag_s, strict=True)) / sum(weights)


@dataclass(frozen=True)
class Agreement:
    """How a replay with the recorded settings matched the recorded applied decisions: each
    recorded action is reproduced by a replayed one of the same direction, within ``tolerance_s``
    (one control interval plus one batch) and one executor of its target."""

    recorded: int
    reproduced: int
    extra: int  # replayed actions matching no recorded one
    same_counts: bool  # as many scale-ups and as many scale-downs
    tolerance_s: float
    pairs: tuple[tuple[Action, Action], ...]  # (recorded, replayed)
    missed: tuple[Action, ...]
    recorded_ups: int
    replayed_ups: int
    outside: int = 0  # recorded actions after the queries' last batch: not compared

    @property
    def summary(self) -> str:
        """One sentence of counts, each said once: a judgement beside them ("same count" next to
        "3 extra") read as a contradiction."""
        replayed = self.reproduced + self.extra
        if self.recorded:
            parts = [f"{self.reproduced} of {self.recorded} recorded {_plural(self.recorded, 'action')} "
                     "reproduced (by a replayed action of the same direction within "
                     f"{self.tolerance_s:.1f} s of it and within 1 executor of its target)"]
            if self.extra:
                parts.append(f"{self.extra} of the {replayed} replayed {_plural(replayed, 'action')} "
                             f"{'matches' if self.extra == 1 else 'match'} no recorded one")
            elif replayed:
                parts.append("every replayed action matches a recorded one")
        else:
            parts = [f"the recorded run took no action in the replayed window, the replay took {replayed}"]
        parts.append(f"scale-ups / scale-downs: {self.recorded_ups} / {self.recorded - self.recorded_ups} "
                     f"recorded, {self.replayed_ups} / {replayed - self.replayed_ups} replayed")
        if self.outside:
            parts.append(f"{self.outside} recorded {_plural(self.outside, 'action')} after the queries' last "
                         "batch, outside the replayed window, not compared")
        return "; ".join(parts)


def _plural(n: int, word: str) -> str:
    return word if n == 1 else word + "s"


@dataclass(frozen=True)
class ReplayRun:
    """What sparkscale would have done with one setting."""

    label: str
    settings: Mapping[str, str]  # the spark.sparkscale.* keys it ran with
    config: AutoscalerConfig
    actions: tuple[Action, ...]
    executor_seconds: float
    series: Series
    flaps: int
    errors: tuple[str, ...]  # errors the control loop reported (it goes on after each)
    provisioning_s: float
    agreement: Agreement | None = None  # with the recorded settings of a sparkscale run only


@dataclass(frozen=True)
class ActualRun:
    """What the recorded application did over the replayed window."""

    actions: tuple[Action, ...]
    executor_seconds: float
    series: Series
    flaps: int


@dataclass(frozen=True)
class Comparison:
    """A recorded application and its replays (the first with the recorded settings, or those
    overridden by ``--conf``)."""

    app: RecordedApplication
    history: ApplicationHistory
    actual: ActualRun
    runs: tuple[ReplayRun, ...]
    assumptions: tuple[str, ...]


def settings_of(app: RecordedApplication, overrides: Mapping[str, str] = {}) -> dict[str, str]:
    """The ``spark.sparkscale.*`` keys a replay runs with: the recorded run's (or, for a run
    without sparkscale, its dynamic allocation's min and max executors), then ``overrides``
    (keys with or without the prefix)."""
    keys = dict(app.sparkscale_conf)
    if not app.ran_sparkscale:
        for name in ("minExecutors", "maxExecutors"):
            value = app.conf.get(f"spark.dynamicAllocation.{name}")
            if value is not None and PREFIX + name not in keys:
                keys[PREFIX + name] = value
    for key, value in overrides.items():
        keys[key if key.startswith(PREFIX) else PREFIX + key] = str(value)
    return keys


def config_of(settings: Mapping[str, str]) -> AutoscalerConfig:
    """The settings validated as sparkscale validates them at startup (a ConfigError names the
    key, the value and what is accepted); ``mode`` is autoscale unless set explicitly."""
    keys = dict(settings)
    keys.setdefault(PREFIX + "mode", "autoscale")
    return AutoscalerConfig.from_spark_conf(keys)


def replay(recorded: RecordedApplication, settings: Mapping[str, str] = {}, *, label: str = "",
           history: ApplicationHistory | None = None, provisioning_s: float | None = None) -> ReplayRun:
    """Run the real autoscaler over the recorded history with ``settings`` (over the recorded
    ones, see :func:`settings_of`). ``provisioning_s``: the simulated request -> registered time
    (default: as the log shows it, else the settings' ``provisioningTime``)."""
    history = history or build_history(recorded)
    keys = settings_of(recorded, settings)
    config = config_of(keys)
    delay = provisioning_s if provisioning_s is not None else (
        history.provisioning_s if history.provisioning_s is not None else config.provisioning_time_s)
    offset = clock_offset(history)
    step = step_of(history, config)
    start = math.floor((history.start - offset) / step) * step
    sim_queries = [_sim_query(q, offset, config.kafka_latest_offsets) for q in history.queries]
    samples: list[tuple[float, int]] = []  # (simulated time, executors listed) after each step
    sim = Simulation(config, sim_queries, history.executors_at_start, delay, seed=0,
                     cores_per_executor=history.cores, step_s=step, start_time=start,
                     kill_delay_s=history.kill_delay_s,
                     app_name=recorded.name or "replay", strict=False,
                     on_step=lambda s: samples.append((s.now, len(s.cluster.executor_ids()))))
    result = sim.run(history.end - offset - start)
    executor_s, previous_t, previous_n = 0.0, start, history.executors_at_start
    for t, n in samples:
        executor_s += previous_n * (t - previous_t)
        previous_t, previous_n = t, n
    actions = tuple(Action(d.time + offset, d.action, d.from_executors, d.to_executors, d.reason)
                    for d in result.actions if d.to_executors != d.from_executors)
    times = [p.t + offset for p in result.timeline]
    series = Series(tuple(times), tuple(float(p.executors) for p in result.timeline),
                    tuple(_total_load(history, t) for t in times),
                    tuple(max((qp.lag_s for qp in p.queries.values()), default=0.0)
                          for p in result.timeline))
    errors = tuple(dict.fromkeys(e.reason for e in result.events if e.kind == "error"))
    run = ReplayRun(label or describe(settings), keys, config, actions, executor_s, series,
                    flaps(actions, config.scale_down_interval_s), errors, delay)
    if recorded.ran_sparkscale and keys == settings_of(recorded):
        run = _with_agreement(run, history)
    return run


def compare(recorded: RecordedApplication, settings: Sequence[Mapping[str, str]] = (),
            base: Mapping[str, str] = {}, *, provisioning_s: float | None = None) -> Comparison:
    """The recorded run beside replays: ``base`` (over the recorded settings), then each of
    ``settings`` over ``base``. Every setting is validated before any replay runs."""
    history = build_history(recorded)
    variants = [dict(base)] + [dict(base) | dict(s) for s in settings]
    for variant in variants:
        config_of(settings_of(recorded, variant))
    labels = ["recorded settings" + (f" + {describe(base)}" if base else "")]
    labels += [describe(s) for s in settings]
    runs = tuple(replay(recorded, v, label=label, history=history, provisioning_s=provisioning_s)
                 for v, label in zip(variants, labels, strict=True))
    assumptions = list(history.assumptions)
    first = runs[0]
    if history.provisioning_s is None and provisioning_s is None:
        assumptions.append(f"the log shows no scale-up of sparkscale's own: executors are taken to register "
                           f"{first.provisioning_s:g} s after they are requested (provisioningTime)")
    if PREFIX + "mode" not in first.settings:
        assumptions.append("the replay runs in mode autoscale (what sparkscale would have applied)")
    elif recorded.sparkscale_conf.get(PREFIX + "mode", "autoscale") != "autoscale":
        assumptions.append(f"the recorded run was in mode {recorded.sparkscale_conf[PREFIX + 'mode']}: the "
                           "replay keeps it (set --conf mode=autoscale to see the changes)")
    for kind in ("collector", "evaluator", "realizer"):
        if first.settings.get(PREFIX + kind):
            assumptions.append(f"{PREFIX}{kind}={first.settings[PREFIX + kind]}: the replay uses the "
                               f"built-in {kind}")
    # The recorded run sampled as often as the most frequent control loop of the replays ticks.
    every = max(min(r.config.interval_s for r in runs), (history.end - history.start) / MAX_SAMPLES)
    times = [history.start + every * i for i in range(1, int((history.end - history.start) / every) + 1)]
    return Comparison(recorded, history, _actual(history, times, first.config), runs,
                      tuple(dict.fromkeys(assumptions)))


def describe(settings: Mapping[str, str]) -> str:
    return ", ".join(f"{k.removeprefix(PREFIX)}={v}" for k, v in settings.items()) or "recorded settings"


def clock_offset(history: ApplicationHistory) -> float:
    """A whole number of days (and of every trigger interval, where that stays under a week)
    before the window's start: subtracted from the log's times to give the simulated clock."""
    period = 86_400_000
    for q in history.queries:
        if q.trigger_s:
            ms = round(q.trigger_s * 1000)
            joint = period * ms // math.gcd(period, ms)
            period = joint if joint <= 7 * 86_400_000 else period
    return math.floor(history.start * 1000 / period) * period / 1000.0


def step_of(history: ApplicationHistory, config: AutoscalerConfig) -> float:
    """The simulator's step (see :data:`MAX_STEP_S`): it divides the control interval."""
    triggers = [q.trigger_s for q in history.queries if q.trigger_s]
    step = min([MAX_STEP_S, *(t / 10 for t in triggers)]) if triggers else MIN_STEP_S * 2
    step = max(MIN_STEP_S, step)
    return config.interval_s / math.ceil(config.interval_s / step - 1e-9)


def _sim_query(q: QueryHistory, offset: float, latest_offsets: bool) -> SimQuery:
    """The recorded query in the simulator; ``latest_offsets``: its Kafka sources' latest offsets are
    read between batches, as the bridge reads them (``kafka.latestOffsets``)."""
    c = q.cost
    return SimQuery(
        q.label, load=lambda t: q.load(t + offset), cost_per_row=c.per_row_s, batch_overhead_s=c.driver_s,
        partitions=max(1, c.widest), trigger_interval_s=q.trigger_s, max_rows_per_batch=q.read_limit,
        initial_backlog=q.initial_backlog, reports_backlog=q.reports_backlog,
        task_overhead_s=c.fixed_task_s / max(1, c.widest), executor_overhead_s=c.per_executor_s,
        new_executor_warmup_s=q.new_executor_warmup_s, efficiency=max(0.5, c.efficiency),
        batch_work=lambda t, n, rows, work: q.batch_work(t + offset, n, rows, work),
        empty_first_batch=q.batches[0].rows == 0, latest_offsets=latest_offsets and q.reads_kafka)


def _total_load(history: ApplicationHistory, t: float) -> float:
    return sum(q.load(t) for q in history.queries)


def _actual(history: ApplicationHistory, times: Sequence[float], config: AutoscalerConfig) -> ActualRun:
    series = Series(tuple(times), tuple(float(history.executors_at(t)) for t in times),
                    tuple(_total_load(history, t) for t in times),
                    tuple(max((q.lag(t) for q in history.queries), default=0.0) for t in times))
    return ActualRun(history.actions, history.executor_seconds, series,
                     flaps(history.actions, config.scale_down_interval_s))


def agreement(recorded: Sequence[Action], replayed: Sequence[Action], tolerance_s: float) -> Agreement:
    """Match each recorded action, in order, with the earliest unmatched replayed one of the same
    direction within ``tolerance_s`` and one executor of its target."""
    def up(a: Action) -> bool:
        return a.to_executors > a.from_executors

    used: set[int] = set()
    pairs, missed = [], []
    for r in recorded:
        match = next((i for i, a in enumerate(replayed) if i not in used and up(a) == up(r)
                      and abs(a.time - r.time) <= tolerance_s
                      and abs(a.to_executors - r.to_executors) <= 1), None)
        if match is None:
            missed.append(r)
        else:
            used.add(match)
            pairs.append((r, replayed[match]))
    ups = sum(map(up, recorded)), sum(map(up, replayed))
    same = ups[0] == ups[1] and len(recorded) == len(replayed)
    return Agreement(len(recorded), len(pairs), len(replayed) - len(used), same, tolerance_s,
                     tuple(pairs), tuple(missed), *ups)


def _with_agreement(run: ReplayRun, history: ApplicationHistory) -> ReplayRun:
    batch = max((max(q.trigger_s or 0.0, statistics.median(b.duration_s for b in q.batches))
                 for q in history.queries), default=0.0)
    found = agreement(history.actions, run.actions, run.config.interval_s + batch)
    return replace(run, agreement=replace(found, outside=len(history.late_actions)))


__all__ = ["ActualRun", "Agreement", "Comparison", "ReplayRun", "Series", "agreement", "compare",
           "config_of", "describe", "replay", "settings_of"]
