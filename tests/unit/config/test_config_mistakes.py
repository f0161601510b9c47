"""Common configuration mistakes get one clear message each, at startup: a misspelt key or value
(with the key or value most likely meant), a near-miss prefix, a duration in the wrong unit or out
of its key's bounds."""

from __future__ import annotations

import pytest

from sparkscale_listener.check.loading import build_checkers
from sparkscale_listener.config.core import (
    CORE_OPTIONS,
    AutoscalerConfig,
    misspelt_prefix_keys,
    misspelt_prefix_warning,
)
from sparkscale_listener.config.options import BARE_SECONDS_LIMIT, ConfigError, Duration, ModuleConfig
from sparkscale_listener.observe.events import build_event_handlers
from sparkscale_listener.spark.session import refuse_decommission_without_spark, validate_modules
from sparkscale_listener.state.loading import build_state_store


def refusal(keys: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as error:
        AutoscalerConfig.from_keys(keys)
    return str(error.value)


# -- unknown keys: "did you mean", never the list of every key ----------------------------------


@pytest.mark.parametrize(("key", "meant"), [
    ("maxExecutor", "maxExecutors"),
    ("minexecutors", "minExecutors"),
    ("scaledown.maxFactor", "scaleDown.maxFactor"),
    ("utilisation.target", "utilization.target"),
    ("scaleDownIntreval", "scaleDownInterval"),
    ("rollback.maxRollback", "rollback.maxRollbacks"),
    # the module kinds' keys, singular where the rule says plural (and back)
    ("checker.taskFailures.maxFailures", "checkers.taskFailures.maxFailures"),
    ("eventHandler.jsonl.path", "eventHandlers.jsonl.path"),
    ("stateStores.sqlite.path", "stateStore.sqlite.path"),
])
def test_an_unknown_key_names_the_key_meant(key: str, meant: str) -> None:
    message = refusal({key: "1"})
    assert message == (f"spark.sparkscale.{key}='1' is not a known key; did you mean "
                       f"spark.sparkscale.{meant}?")


def test_an_unknown_key_with_nothing_close_is_one_short_line() -> None:
    message = refusal({"frobnicate": "yes"})
    assert message.startswith("spark.sparkscale.frobnicate='yes' is not a known key; no known key is close")
    assert "maxExecutors" not in message and len(message) < 160


def test_several_unknown_keys_are_one_line_each() -> None:
    lines = refusal({"maxExecutor": "4", "minExecutor": "1", "interval": "10s"}).splitlines()
    assert lines == ["spark.sparkscale.maxExecutor='4' is not a known key; did you mean "
                     "spark.sparkscale.maxExecutors?",
                     "spark.sparkscale.minExecutor='1' is not a known key; did you mean "
                     "spark.sparkscale.minExecutors?"]


def test_a_modules_unknown_key_names_the_key_meant_or_lists_the_modules_few_keys() -> None:
    with pytest.raises(ConfigError) as error:
        build_checkers(AutoscalerConfig.from_keys({"checkers.taskFailures.maxFailure": "5"}))
    assert str(error.value) == ("spark.sparkscale.checkers.taskFailures.maxFailure='5' is not a known key; "
                                "did you mean spark.sparkscale.checkers.taskFailures.maxFailures?")
    with pytest.raises(ConfigError) as error:
        build_checkers(AutoscalerConfig.from_keys({"checkers.taskFailures.size": "5"}))
    assert str(error.value).endswith("the keys under spark.sparkscale.checkers.taskFailures. are "
                                     "maxFailureRatio, maxFailures, newExecutorShare, window")


def test_a_misspelt_checker_name_in_a_key_names_the_checker_meant() -> None:
    with pytest.raises(ConfigError) as error:
        build_checkers(AutoscalerConfig.from_keys({"checkers.gcpressure.threshold": "0.5"}))
    assert str(error.value).endswith("did you mean spark.sparkscale.checkers.gcPressure.threshold?")


def test_a_misspelt_event_handler_in_a_key_or_in_the_list() -> None:
    config = AutoscalerConfig.from_keys({"eventHandlers": "logging,jsonl", "eventHandlers.jsnl.path": "/x"})
    with pytest.raises(ConfigError, match=r"did you mean spark\.sparkscale\.eventHandlers\.jsonl\.path\?$"):
        build_event_handlers(config)
    config = AutoscalerConfig.from_keys({"eventHandlers.jsonl.path": "/x"})
    with pytest.raises(ConfigError, match=r"add jsonl to spark\.sparkscale\.eventHandlers to use it$"):
        build_event_handlers(config)
    with pytest.raises(ConfigError, match=r"^spark\.sparkscale\.eventHandlers\.logging\.level='info' is "
                                          r"not a known key; nothing is read under"):
        build_event_handlers(AutoscalerConfig.from_keys({"eventHandlers.logging.level": "info"}))
    with pytest.raises(ConfigError, match=r"'listenerbus2' is not accepted; did you mean listenerBus\?$"):
        build_event_handlers(AutoscalerConfig.from_keys({"eventHandlers": "logging,listenerbus2"}))


@pytest.mark.parametrize(("keys", "expected"), [
    ({"mode": "autoscaler"}, "spark.sparkscale.mode='autoscaler' is not accepted (did you mean autoscale?); "
                             "expected one of: autoscale, recommend, reactive"),
    ({"rollback.target": "lastt"}, "(did you mean last?)"),
])
def test_a_misspelt_choice_names_the_choice_meant(keys: dict[str, str], expected: str) -> None:
    assert expected in refusal(keys)


def test_a_misspelt_state_store_names_the_store_meant() -> None:
    with pytest.raises(ConfigError, match=r"^spark\.sparkscale\.stateStore='sqllite' is not accepted; "
                                          r"did you mean sqlite\?$"):
        build_state_store(AutoscalerConfig.from_keys({"stateStore": "sqllite"}))


# -- near-miss prefixes --------------------------------------------------------------------------


@pytest.mark.parametrize("key", [
    "spark.sparkScale.maxExecutors", "spark.SparkScale.maxExecutors", "spark.spark-scale.maxExecutors",
    "spark.spark_scale.maxExecutors", "spark.sparkscaler.maxExecutors", "spark.sparkcale.maxExecutors",
    "spark.sparkscal.maxExecutors", "spark.sprakscale.maxExecutors", "spark.sparkscaling.maxExecutors",
    "sparkscale.maxExecutors", "spark.sparkscale_listener.maxExecutors",
])
def test_a_near_miss_prefix_is_found_with_the_key_meant(key: str) -> None:
    assert misspelt_prefix_keys({key: "20"}) == {key: "spark.sparkscale.maxExecutors"}


def test_spark_own_namespaces_and_our_prefix_are_not_near_misses() -> None:
    spark_keys = ["spark.sparkscale.maxExecutors", "spark.sql.shuffle.partitions", "spark.sparkr.r.command",
                  "spark.scheduler.mode", "spark.speculation.quantile",
                  "spark.streaming.backpressure.enabled",
                  "spark.shuffle.service.enabled", "spark.storage.level", "spark.submit.deployMode",
                  "spark.dynamicAllocation.enabled", "spark.databricks.delta.x", "spark.sparklens.reporting",
                  "spark.executor.cores", "spark.master", "spark.app.name", "spark.ui.port"]
    assert misspelt_prefix_keys(dict.fromkeys(spark_keys, "1")) == {}


def test_near_misses_are_one_warning_naming_each_key_and_the_prefix() -> None:
    assert misspelt_prefix_warning({"spark.sparkScale.maxExecutors": "20"}) == (
        "spark.sparkScale.maxExecutors='20' is ignored: did you mean spark.sparkscale.maxExecutors? "
        "sparkscale reads only the keys that start with spark.sparkscale.")
    text = misspelt_prefix_warning({"spark.sparkScale.a": "1", "spark.sparkscaler.b": "2",
                                    "spark.sql.x": "3"})
    assert text is not None and text.startswith("2 keys are ignored")
    assert "spark.sparkScale.a='1' (did you mean spark.sparkscale.a?)" in text
    assert "spark.sparkscaler.b='2' (did you mean spark.sparkscale.b?)" in text
    assert misspelt_prefix_warning({"spark.sparkscale.maxExecutors": "3"}) is None


# -- durations -----------------------------------------------------------------------------------


def test_a_milliseconds_habit_is_refused_saying_how_it_was_read_and_what_to_write() -> None:
    assert refusal({"scaleDownInterval": "300000"}) == (
        "spark.sparkscale.scaleDownInterval='300000' was read as 300000 s (83.3 h): a bare number is "
        "seconds, and the longest accepted is 1d. If you meant milliseconds, write 300s or 5min")


def test_a_large_bare_number_within_the_bound_is_refused_too() -> None:
    # 16.7 hours is a possible scaleDownInterval, but written as 60000 it is far likelier a
    # milliseconds habit (60 s); writing the unit settles it.
    message = refusal({"scaleDownInterval": "60000"})
    assert message.startswith("spark.sparkscale.scaleDownInterval='60000' was read as 60000 s (16.7 h)")
    assert message.endswith("Write the unit: 60s or 1min if you meant 60000 ms, 60000s if you meant seconds")
    assert AutoscalerConfig.from_keys({"scaleDownInterval": "60000s"}).scale_down_interval_s == 60000
    assert AutoscalerConfig.from_keys({"scaleDownInterval": "900"}).scale_down_interval_s == 900
    assert BARE_SECONDS_LIMIT == 1000


@pytest.mark.parametrize(("keys", "message"), [
    ({"interval": "2h"}, "spark.sparkscale.interval='2h' is 2 h, more than the longest accepted, 10min; "
                         "expected a duration of at least 500ms and at most 10min (units ms, s, min, h, d; "
                         "a bare number is seconds)"),
    ({"interval": "700"}, "spark.sparkscale.interval='700' was read as 700 s (11.7 min), more than the "
                          "longest accepted, 10min"),
    ({"rollback.pauseDuration": "8d"}, "is 8 d, more than the longest accepted, 7d"),
    ({"interval": "1500ms"}, None),
    # Ticks back to back took a core of the driver.
    ({"interval": "1ms"}, "spark.sparkscale.interval='1ms' is shorter than the shortest accepted, 500ms; "
                          "expected a duration of at least 500ms and at most 10min"),
    ({"interval": "500ms"}, None),
])
def test_each_duration_key_refuses_values_over_its_bound(keys: dict[str, str], message: str | None) -> None:
    if message is None:
        AutoscalerConfig.from_keys(keys)
    else:
        assert message in refusal(keys)


def test_zero_where_it_must_be_positive_does_not_contradict_itself() -> None:
    message = refusal({"metricsWindow": "0"})
    assert message.startswith("spark.sparkscale.metricsWindow='0' must be greater than zero; expected a "
                              "duration above zero and at most 1h")
    assert "non-negative" not in message
    assert refusal({"metricsWindow": "0s"}).startswith("spark.sparkscale.metricsWindow='0s' must be greater "
                                                       "than zero")
    # A key with a lower bound names it, for zero too.
    assert refusal({"interval": "0"}).startswith("spark.sparkscale.interval='0' is shorter than the shortest "
                                                 "accepted, 500ms; expected a duration of at least 500ms")


_UNITS = "(units ms, s, min, h, d; a bare number is seconds)"


@pytest.mark.parametrize(("keys", "message"), [
    ({"metricsWindow": "-5s"},
     "spark.sparkscale.metricsWindow='-5s' is negative, and this key's duration must be greater than zero; "
     f"expected a duration above zero and at most 1h {_UNITS}"),
    ({"scaleDownInterval": "-1min"},
     "spark.sparkscale.scaleDownInterval='-1min' is negative, and a duration must be 0 or more; expected a "
     f"duration at most 1d {_UNITS}"),
    ({"interval": "-5"},
     "spark.sparkscale.interval='-5' is negative, and this key's duration must be at least 500ms; expected a "
     f"duration of at least 500ms and at most 10min {_UNITS}"),
    ({"rollback.pauseDuration": "-1h"}, "spark.sparkscale.rollback.pauseDuration='-1h' is negative, and a "
                                        "duration must be 0 or more; expected a duration at most 7d "
                                        f"{_UNITS}, or untilRestart"),
    # a bad unit after the sign is no duration at all
    ({"metricsWindow": "-5parsecs"}, "spark.sparkscale.metricsWindow='-5parsecs' is not a valid duration"),
])
def test_a_negative_duration_says_it_is_negative_and_what_the_key_takes(keys: dict[str, str],
                                                                         message: str) -> None:
    assert refusal(keys).startswith(message)


def test_a_negative_duration_is_refused_as_negative_by_every_way_in() -> None:
    with pytest.raises(ConfigError, match=r"^spark\.sparkscale\.metricsWindow=-5\.0 is negative, and this "
                                          r"key's duration must be greater than zero"):
        AutoscalerConfig(metrics_window_s=-5.0)
    with pytest.raises(ConfigError, match=r"^spark\.sparkscale\.checkers\.latency\.grace='-3s' is negative, "
                                          r"and a duration must be 0 or more; expected a duration such as"):
        ModuleConfig("checkers.latency.", {"grace": "-3s"}).duration("grace", 60.0)


def test_several_bad_keys_are_reported_together_a_line_each_in_the_order_of_the_keys() -> None:
    lines = refusal({"maxExecutors": "two", "scaleDownInterval": "-1min", "utilization.target": "1.5",
                     "maxExecutor": "3", "interval": "10 parsecs", "mode": "autoscale"}).splitlines()
    assert lines == [
        "spark.sparkscale.interval='10 parsecs' is not a valid duration; expected a duration such as 500ms, "
        f"30s, 2min or 1h {_UNITS}",
        "spark.sparkscale.maxExecutor='3' is not a known key; did you mean spark.sparkscale.maxExecutors?",
        "spark.sparkscale.maxExecutors='two' is not an integer; expected a whole number >= 1",
        "spark.sparkscale.scaleDownInterval='-1min' is negative, and a duration must be 0 or more; expected "
        f"a duration at most 1d {_UNITS}",
        "spark.sparkscale.utilization.target='1.5' is out of range; expected a number, 0 < x <= 1"]


def test_several_keys_at_odds_with_each_other_are_reported_together() -> None:
    assert refusal({"minExecutors": "5", "maxExecutors": "2", "interval": "1min"}).splitlines() == [
        "spark.sparkscale.minExecutors=5 is greater than spark.sparkscale.maxExecutors=2; expected "
        "minExecutors <= maxExecutors",
        "spark.sparkscale.interval=1min, spark.sparkscale.metricsWindow=1min: expected interval <= "
        "metricsWindow / 2 (at least two samples in each window)"]
    # Built directly (the simulator, tests): every bad field at once as well.
    with pytest.raises(ConfigError) as error:
        AutoscalerConfig(min_executors=0, interval_s=-1.0)
    assert [line.split("=")[0] for line in str(error.value).splitlines()] == [
        "spark.sparkscale.minExecutors", "spark.sparkscale.interval"]


def test_a_modules_bad_values_are_reported_together() -> None:
    with pytest.raises(ConfigError) as error:
        build_checkers(AutoscalerConfig.from_keys({"checkers.taskFailures.maxFailures": "many",
                                                   "checkers.taskFailures.window": "-1min"}))
    lines = str(error.value).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("spark.sparkscale.checkers.taskFailures.maxFailures='many' is not")
    assert lines[1].startswith("spark.sparkscale.checkers.taskFailures.window='-1min' is negative")


@pytest.mark.parametrize("value", ["inf", "-inf", "1e400", "nan"])
def test_a_number_that_is_not_finite_is_refused(value: str) -> None:
    # "inf" is how "unlimited" is often written; accepted, every scale-up raised (ceil of inf).
    assert refusal({"scaleUp.maxFactor": value}) == (
        f"spark.sparkscale.scaleUp.maxFactor={value!r} is not a finite number; expected a number, x > 1")


def test_an_interval_longer_than_half_the_metrics_window_is_refused() -> None:
    # With no earlier sample in the window, a batch running all along read as nothing arriving:
    # an overloaded query was scaled down (the simulator, interval 2min, metricsWindow 1min).
    assert refusal({"interval": "2min"}) == (
        "spark.sparkscale.interval=2min, spark.sparkscale.metricsWindow=1min: expected interval <= "
        "metricsWindow / 2 (at least two samples in each window)")
    assert "interval=20s" in refusal({"interval": "20s", "metricsWindow": "30s"})
    AutoscalerConfig.from_keys({"interval": "30s"})
    AutoscalerConfig.from_keys({"interval": "5s", "metricsWindow": "10s"})


@pytest.mark.parametrize(("keys", "expected"), [
    ({"stateStore": "sqllite"}, "did you mean sqlite?"),
    ({"stateStore": "sqlite"}, "stateStore=sqlite needs spark.sparkscale.stateStore.sqlite.path"),
    ({"stateStore": "sqlite", "stateStore.sqlite.path": "state.db", "stateStore.maxRecord": "5"},
     "stateStore.maxRecord"),
    ({"eventHandlers": "logging,slack"}, "'slack' is not accepted"),
    ({"eventHandlers": "logging,jsonl"}, "jsonl.path is empty"),
])
def test_state_store_and_event_handler_mistakes_are_refused_before_the_session_starts(
        keys: dict[str, str], expected: str) -> None:
    # autoscale(builder) runs validate_modules before getOrCreate(): refused there, no cluster is
    # allocated for a session that would then fail (and, in a notebook, be handed back on retry).
    with pytest.raises(ConfigError) as error:
        validate_modules(AutoscalerConfig.from_keys(keys))
    assert expected in str(error.value)


def test_decommission_without_sparks_own_is_refused_before_the_session_starts() -> None:
    config = AutoscalerConfig.from_keys({"scaleDown.decommission": "true"})
    with pytest.raises(ConfigError, match=r"needs spark\.decommission\.enabled=true"):
        refuse_decommission_without_spark(config, {})
    refuse_decommission_without_spark(config, {"spark.decommission.enabled": "true"})


def test_every_duration_key_declares_its_bound() -> None:
    durations = [o for o in CORE_OPTIONS if isinstance(o.type, Duration)]
    assert len(durations) >= 13
    for opt in durations:
        bound = opt.type.at_most
        default = opt.default or 0.0
        assert default * 10 <= bound, f"{opt.key}: a bound of {bound} s leaves no room above the default"
        low = opt.type.at_least
        assert low <= default / 10, f"{opt.key}: a lower bound of {low} s leaves no room below the default"
        # The reference's accepted column states the bounds the key enforces.
        accepted = opt.type.describe().accepted
        assert f"at most {opt.type.render(bound)}" in accepted
        opt.parse(opt.type.render(bound))
        with pytest.raises(ConfigError, match="more than the longest accepted"):
            opt.parse(f"{(bound + 1) * 1000:.0f}ms")
        if low:
            assert accepted.startswith(f"at least {opt.type.render(low)}, ")
            opt.parse(opt.type.render(low))
            with pytest.raises(ConfigError, match="shorter than the shortest accepted"):
                opt.parse(f"{low * 1000 - 1:.0f}ms")


def test_a_custom_modules_duration_getter_applies_the_same_rules() -> None:
    options = ModuleConfig("checkers.latency.", {"window": "120000", "grace": "3h", "ok": "90s"})
    with pytest.raises(ConfigError, match=r"^spark\.sparkscale\.checkers\.latency\.window='120000' was "
                                          r"read as 120000 s \(33\.3 h\)"):
        options.duration("window", 60.0)
    with pytest.raises(ConfigError, match=r"'3h' is 3 h, more than the longest accepted, 1h"):
        options.duration("grace", 60.0, at_most=3600)
    assert options.duration("ok", 60.0, at_most=3600) == 90.0
