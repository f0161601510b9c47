"""Configuration: one declaration per key, validated however the config is built."""

from __future__ import annotations

import pytest

from sparkscale_listener.config.core import CORE_OPTIONS, AutoscalerConfig
from sparkscale_listener.config.options import (
    Boolean,
    Choice,
    ConfigError,
    DailyWindows,
    Duration,
    Integer,
    Names,
    Number,
    Text,
    ValueType,
)


def test_defaults_of_the_dataclass_are_the_declared_ones() -> None:
    config = AutoscalerConfig()
    for opt in CORE_OPTIONS:
        name = next(n for n, f in AutoscalerConfig.__dataclass_fields__.items()
                    if f.metadata.get("option") is opt)
        assert getattr(config, name) == opt.default
    assert AutoscalerConfig.from_keys({}) == AutoscalerConfig()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"min_executors": 0}, "spark.sparkscale.minExecutors=0 is out of range; expected a whole number >= 1"),
    ({"utilization_target": 1.5}, "spark.sparkscale.utilization.target='1.5' is out of range"),
    ({"mode": "turbo"}, "spark.sparkscale.mode='turbo' is not accepted; expected one of: autoscale"),
    ({"interval_s": 0.0}, "spark.sparkscale.interval=0.0 is shorter than the shortest accepted, 500ms"),
    ({"min_executors": 5, "max_executors": 2}, "minExecutors=5 is greater than"),
])
def test_direct_construction_is_validated_too(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        AutoscalerConfig(**kwargs)


def test_until_restart_and_stabilization_interval_words() -> None:
    config = AutoscalerConfig.from_keys({"rollback.pauseDuration": "untilRestart"})
    assert config.rollback_pause_s is None
    with pytest.raises(ConfigError, match=r"expected a duration at most 7d .*, or untilRestart"):
        AutoscalerConfig.from_keys({"rollback.pauseDuration": "forever"})


@pytest.mark.parametrize(("value_type", "kind", "accepted"), [
    (Duration(at_least=0.5, at_most=600.0), "duration", "at least 500ms, at most 10min"),
    (Duration(positive=True, at_most=3600.0), "duration", "more than 0, at most 1h"),
    (Duration(until="untilRestart", at_most=7 * 86400.0), "duration", "at most 7d, or untilRestart"),
    (Number(0.0, 1.0, low_open=True), "number", "0 < x <= 1"),
    (Number(1.0, None, low_open=True), "number", "x > 1"),
    (Number(), "number", "any"),
    (Integer(minimum=1, optional=True), "integer", "x >= 1, or empty"),
    (Boolean(), "boolean", "true, false"),
    (Choice("autoscale", "recommend", "reactive"), "choice", "autoscale, recommend, reactive"),
    (Names(), "comma-separated names", "any, or empty"),
    (Text(), "text", "any"),
    (DailyWindows(), "HH:MM windows",
     "HH:MM-HH:MM in local time, 00:00 to 23:59 (a window may wrap midnight), or empty"),
])
def test_each_value_type_describes_its_kind_and_what_it_accepts(value_type: ValueType, kind: str,
                                                                 accepted: str) -> None:
    assert value_type.describe() == (kind, accepted)


def test_a_number_accepts_exactly_the_range_it_describes() -> None:
    # "0 < x <= 1": the open end refused, the closed one accepted.
    share = Number(0.0, 1.0, low_open=True)
    assert share.describe().accepted == "0 < x <= 1"
    assert share.parse("k", "1") == 1.0
    with pytest.raises(ConfigError, match="out of range"):
        share.parse("k", "0")


def test_a_target_is_bounded_by_min_and_max_executors_in_one_place() -> None:
    config = AutoscalerConfig(min_executors=2, max_executors=5)
    assert [config.bounded(n) for n in (0, 2, 3, 5, 9)] == [2, 2, 3, 5, 5]


def test_the_mode_is_parsed_once_into_a_member_that_still_reads_as_its_key_value() -> None:
    from sparkscale_listener.config.core import Mode

    config = AutoscalerConfig.from_keys({"mode": "recommend"})
    assert config.mode is Mode.RECOMMEND and f"{config.mode}" == "recommend" == config.mode
    assert AutoscalerConfig().mode is Mode.AUTOSCALE
    assert AutoscalerConfig(mode="reactive").mode is Mode.REACTIVE  # type: ignore[arg-type]
