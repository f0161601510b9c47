"""Configuration: one declaration per key, validated however the config is built."""

from __future__ import annotations

import pytest

from sparkscale_listener.config.core import CORE_OPTIONS, AutoscalerConfig
from sparkscale_listener.config.options import ConfigError


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
