"""The forecast through the whole autoscaler on the simulator: a recurring ramp is met by a pre-scale
before it comes once the forecast is applied, never without it; the ramp's end is given back without
waiting scaleDownInterval out where the forecast sees the load stay low; in shadow the actions are
those of no forecast at all; and a restarted driver forecasts from the state store at once."""

from __future__ import annotations

from pathlib import Path

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.decisions import Decision
from sparkscale_listener.sim import SimQuery, Simulation
from sparkscale_listener.state.store import SqliteStateStore

PERIOD_S = 600.0
RAMP_AT = 0.4  # share of the period where the ramp starts: night 500 rows/s to 4000 in 30 s
NIGHT, DAY = 500.0, 4000.0


def day(t: float) -> float:
    x = (t % PERIOD_S) / PERIOD_S
    if x < RAMP_AT:
        return NIGHT
    return min(DAY, NIGHT + (DAY - NIGHT) * (x - RAMP_AT) * PERIOD_S / 30.0) if x < 0.8 else NIGHT


def orders() -> SimQuery:
    return SimQuery("orders", day, cost_per_row=0.002, batch_overhead_s=0.5, partitions=32,
                    trigger_interval_s=10.0, max_rows_per_batch=2 * DAY * 10.0, noise=0.1,
                    task_overhead_s=0.05, executor_overhead_s=0.1)


def run(mode: str, periods: float = 3.0, **kwargs: object) -> tuple[Simulation, list[Decision]]:
    """``periods`` of the day with ``forecast.mode``; a scaleDownInterval of 2 min: the night's 4 min
    give executors back (at 5 min, the forecast holds them all night: the load returns within it)."""
    config = AutoscalerConfig.from_keys({"maxExecutors": "20", "scaleDownInterval": "2min",
                                         "forecast.mode": mode, "forecast.period": "10min"})
    sim = Simulation(config, [orders()], 1, 30.0, seed=1, cores_per_executor=2,
                     **kwargs)  # type: ignore[arg-type]
    return sim, sim.run(periods * PERIOD_S).actions


def ups_around_the_ramp(actions: list[Decision], period: int) -> list[Decision]:
    ramp = period * PERIOD_S + RAMP_AT * PERIOD_S
    return [a for a in actions if a.action == "scale_up" and ramp - 60.0 <= a.time < ramp + 60.0]


def test_a_recurring_ramp_is_met_by_a_pre_scale_before_it_comes() -> None:
    _, actions = run("on")
    ups = ups_around_the_ramp(actions, 2)
    assert ups, "the third period's ramp is scaled up for"
    first = ups[0]
    assert first.reason.startswith("pre-scale"), first.reason
    assert first.time < 2 * PERIOD_S + RAMP_AT * PERIOD_S, "before the ramp starts"
    assert "the load reaches" in first.reason and "forecast error" in first.reason


def test_without_the_forecast_the_ramp_is_scaled_up_for_after_it_starts() -> None:
    _, actions = run("off")
    ups = ups_around_the_ramp(actions, 2)
    assert ups and ups[0].time >= 2 * PERIOD_S + RAMP_AT * PERIOD_S
    assert not [a for a in actions if a.reason.startswith("pre-scale")]


def test_the_evening_is_given_back_sooner_where_the_forecast_sees_the_night_coming() -> None:
    _, on = run("on")
    _, off = run("off")
    evening_ends = PERIOD_S + 0.8 * PERIOD_S  # the second evening (the first is learnt)

    def first_down(actions: list[Decision]) -> Decision:
        return next(a for a in actions if a.action == "scale_down" and a.time >= evening_ends)

    confirmed = first_down(on)
    assert "the forecast sees the load stay low" in confirmed.reason, confirmed.reason
    assert confirmed.time < first_down(off).time
    # Nothing learnt in the first period: no scale-down there goes by the forecast.
    assert not [a for a in on if a.time < PERIOD_S and "forecast" in a.reason]


def test_in_shadow_the_actions_are_those_without_a_forecast() -> None:
    sim, shadow = run("shadow")
    _, off = run("off")
    assert [(a.time, a.from_executors, a.to_executors) for a in shadow] == \
        [(a.time, a.from_executors, a.to_executors) for a in off]
    forecast = sim.autoscaler.status()["forecasts"]["orders"]
    assert not forecast["applied"] and forecast["state"] == "shadow (forecast.mode=shadow)"


def test_a_restarted_driver_forecasts_from_the_state_store_at_once(tmp_path: Path) -> None:
    db = str(tmp_path / "state.db")
    before, _ = run("on", periods=1.3, state_store=SqliteStateStore(db), app_name="orders-job")
    before.autoscaler.close()
    after, _ = run("on", periods=0.1, state_store=SqliteStateStore(db), app_name="orders-job",
                   start_time=before.now + 30.0)
    forecast = after.autoscaler.status()["forecasts"].get("orders")
    assert forecast is not None, "the profile learnt before the restart forecasts"
    fresh, _ = run("on", periods=0.1, start_time=before.now + 30.0)
    assert not fresh.autoscaler.status()["forecasts"], "a driver without the store has a period to learn"
