"""sparkscale: a streaming-aware autoscaler for Spark Structured Streaming, inside the driver.

The one line::

    from sparkscale_listener import autoscale
    spark = autoscale(SparkSession.builder.appName("my-job"))

and ``sparkscale_listener.autoscaler(spark).status()`` to see what it does. Every decision is a line
on the ``sparkscale`` logger: ``logging.basicConfig(level=logging.INFO)`` shows them (the driver log
shows them anyway while the application configures no logging).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .config.core import AutoscalerConfig
from .config.options import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .control_loop import Autoscaler

__all__ = ["AutoscalerConfig", "ConfigError", "autoscale", "autoscaler", "stop_autoscaler"]
# The one place the version is written: pyproject.toml reads it from here.
__version__ = "0.1.0"

# A library's logger gets a NullHandler and nothing else: the application's logging decides where the
# lines go (see sparkscale_listener.observe.logs for the one exception, while nothing is configured).
logging.getLogger("sparkscale").addHandler(logging.NullHandler())


def autoscale(session_or_builder: Any) -> SparkSession:
    """Start the autoscaler with the session and return the session.

    Given a ``SparkSession.Builder``: validates every ``spark.sparkscale.*`` key first, adds the
    JVM bridge (jar and ``spark.plugins`` entry), calls ``getOrCreate()`` and starts the control
    loop. Given a running ``SparkSession``: starts the control loop if the session was created
    with the bridge, else raises :class:`~sparkscale_listener.spark.bridge.BridgeNotInstalledError`
    saying how to fix it.
    """
    from .spark.session import autoscale as _autoscale

    return _autoscale(session_or_builder)


def autoscaler(spark: SparkSession) -> Autoscaler:
    """The autoscaler running for this session's application."""
    from .spark.session import autoscaler as _autoscaler

    return _autoscaler(spark)


def stop_autoscaler(spark: SparkSession) -> None:
    """Stop the control loop (executors stay as they are). ``spark.stop()`` stops it too."""
    from .spark.session import stop_autoscaler as _stop

    _stop(spark)
