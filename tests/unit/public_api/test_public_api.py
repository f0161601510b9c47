"""The user's imports keep working once every submodule has been loaded."""

import importlib
import pkgutil

import pytest

import sparkscale_listener


def test_autoscale_and_autoscaler_stay_functions_after_all_submodules_load() -> None:
    for module in pkgutil.iter_modules(sparkscale_listener.__path__):
        importlib.import_module(f"sparkscale_listener.{module.name}")
    from sparkscale_listener import autoscale, autoscaler

    assert callable(autoscale) and callable(autoscaler)
    assert autoscaler.__module__ == "sparkscale_listener"


def test_spark_connect_is_refused_with_what_works_instead(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    from sparkscale_listener import autoscale
    from sparkscale_listener.spark.session import UnsupportedSessionError

    builder = SparkSession.builder.remote("sc://127.0.0.1:15002")
    try:
        with pytest.raises(UnsupportedSessionError, match="Spark Connect session; sparkscale runs inside "
                                                          "the driver: it needs the driver JVM"):
            autoscale(builder)
    finally:
        builder._options.pop("spark.remote", None)  # the builder is shared by the whole process

    class ConnectSession:  # what pyspark.sql.connect.session.SparkSession looks like to us
        pass

    ConnectSession.__module__ = "pyspark.sql.connect.session"
    with pytest.raises(UnsupportedSessionError, match="spark-submit, the pyspark shell"):
        autoscale(ConnectSession())
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:15002")
    with pytest.raises(UnsupportedSessionError):
        autoscale(SparkSession.builder)


def test_a_bridge_that_does_not_load_is_a_clear_error_not_a_jvm_stack_trace() -> None:
    from sparkscale_listener.spark.bridge import BridgeNotInstalledError
    from sparkscale_listener.spark.session import _start_session

    class Builder:
        def getOrCreate(self) -> None:
            raise RuntimeError("An error occurred while calling None.org.apache.spark.api.java."
                               "JavaSparkContext.\n: java.lang.ClassNotFoundException: "
                               "io.sparkscale.bridge.SparkscalePlugin\n\tat java.base/...")

    with pytest.raises(BridgeNotInstalledError) as err:
        _start_session(Builder(), "/x/sparkscale-bridge-spark4_2.13.jar")
    message = str(err.value)
    assert "ClassNotFoundException: io.sparkscale.bridge.SparkscalePlugin" in message
    assert "--jars /x/sparkscale-bridge-spark4_2.13.jar --conf spark.plugins=" in message
    assert "\tat " not in message and err.value.__cause__ is None

    class Unrelated:
        def getOrCreate(self) -> None:
            raise RuntimeError("no master")

    with pytest.raises(RuntimeError, match="no master"):
        _start_session(Unrelated(), "/x/j.jar")


def test_plugin_authors_import_every_interface_from_one_module() -> None:
    """``sparkscale_listener.plugins`` re-exports the very classes the configuration checks a plugin
    against, and the examples and docs/plugins.md import from it alone (an import from the inside
    breaks when the inside moves)."""
    import re
    from pathlib import Path

    from sparkscale_listener import plugins
    from sparkscale_listener.check.checker import ScalingChecker
    from sparkscale_listener.collect.collector import MetricCollector
    from sparkscale_listener.config.plugins import PluginContext
    from sparkscale_listener.evaluator.base import MetricEvaluator
    from sparkscale_listener.observe.events import EventHandler
    from sparkscale_listener.realize.realizer import ScalingRealizer
    from sparkscale_listener.state.store import StateStore

    for cls in (MetricCollector, MetricEvaluator, ScalingRealizer, ScalingChecker, StateStore, EventHandler,
                PluginContext):
        assert getattr(plugins, cls.__name__) is cls, cls
    assert all(hasattr(plugins, name) for name in plugins.__all__)
    root = Path(__file__).resolve().parents[3]
    for path in (root / "examples" / "plugins.py", root / "examples" / "external_backlog.py",
                 root / "docs" / "plugins.md"):
        inside = re.findall(r"from sparkscale_listener\.(?!plugins\b)[\w.]+ import", path.read_text())
        assert not inside, (path.name, inside)
