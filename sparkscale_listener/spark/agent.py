"""The autoscaler beside the driver (``spark.sparkscale.launch=agent``): ``python -m sparkscale_listener
agent``, which the bridge's driver plugin starts as a child process of the driver JVM (``AgentProcess``
in the bridge) with a py4j gateway's port and secret in ``PYSPARK_GATEWAY_PORT`` and
``PYSPARK_GATEWAY_SECRET``, as spark-submit starts a PySpark application.

It attaches a pyspark SparkContext to the driver's running one, and a SparkSession on it, and starts
the autoscaler the in-job launch starts (:func:`~.session.attach`): the same keys, refusals and
modules, with the streaming queries of every session of the driver read from the JVM
(:mod:`~sparkscale_listener.collect.jvm_feed`). Its log lines go to stderr, which the plugin writes
into the driver's log. Exit codes: 0 when the application ended, :data:`CONFIGURATION_REFUSED` when
the configuration was refused (the plugin does not restart it then), anything else is a failure the
plugin restarts it after.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from typing import Any, TextIO

from ..config.options import ConfigError
from ..observe.logs import LOGGER_NAME
from .bridge import BRIDGE_CLASS, BridgeNotInstalledError, JvmBridge

log = logging.getLogger(LOGGER_NAME)

# The bridge's AgentProcess.CONFIGURATION_REFUSED: a restart cannot help.
CONFIGURATION_REFUSED = 3
# How often the agent looks whether the application has ended.
ALIVE_CHECK_S = 1.0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "agent", help="run the autoscaler beside a driver (started by the driver plugin)",
        description="Attach to the driver JVM whose gateway PYSPARK_GATEWAY_PORT and "
        "PYSPARK_GATEWAY_SECRET name, and run the autoscaler of its application until it ends. The "
        "driver plugin starts it with spark.sparkscale.launch=agent; it is not meant to be run by hand.")
    p.add_argument("--check", action="store_true",
                   help="check the application's Spark conf (a JSON object on standard input) as the "
                   "driver starts, and exit: 0 accepted, 3 refused (the reason on standard error)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    _log_to_stderr()
    if args.check:
        return check(sys.stdin)
    if "PYSPARK_GATEWAY_PORT" not in os.environ or "PYSPARK_GATEWAY_SECRET" not in os.environ:
        log.error("the agent needs PYSPARK_GATEWAY_PORT and PYSPARK_GATEWAY_SECRET (the driver plugin sets "
                  "them when spark.sparkscale.launch=agent)")
        return CONFIGURATION_REFUSED
    from .session import UnsupportedSessionError, attach

    spark = attach_to_driver()
    try:
        attach(spark, agent=True)
    except (ConfigError, BridgeNotInstalledError, UnsupportedSessionError) as err:
        log.error("%s", err)
        return CONFIGURATION_REFUSED
    bridge = JvmBridge(spark.sparkContext)
    while not bridge.context_stopped():
        time.sleep(ALIVE_CHECK_S)
    return 0


def check(conf_json: TextIO) -> int:
    """The driver plugin's check at the driver's start: the checks the in-job launch makes before
    its session starts, on the conf as a JSON object."""
    from .session import check_before_start

    try:
        conf = json.load(conf_json)
    except ValueError:
        conf = None
    if not isinstance(conf, dict):
        log.error("the agent's check needs the Spark conf as a JSON object on its input")
        return 1
    try:
        check_before_start({str(k): str(v) for k, v in conf.items()})
    except ConfigError as err:
        log.error("%s", err)
        return CONFIGURATION_REFUSED
    return 0


def attach_to_driver() -> Any:
    """A SparkSession on the driver's own SparkContext, over the gateway the environment names."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    gateway = launch_gateway()  # with PYSPARK_GATEWAY_PORT set: connects, launches nothing
    bridge: Any = gateway.jvm
    for part in BRIDGE_CLASS.split("."):
        bridge = getattr(bridge, part)
    context = bridge.sparkContext()
    if context is None:
        raise BridgeNotInstalledError("the driver's SparkContext has stopped, or the sparkscale plugin "
                                      "is not running in it")
    jsc = gateway.jvm.org.apache.spark.api.java.JavaSparkContext.fromSparkContext(context)
    # The context's own settings (a copy: pyspark sets defaults in what it is given), not the JVM's
    # system properties, which a driver that built its conf in code does not have.
    sc = SparkContext(gateway=gateway, jsc=jsc, conf=SparkConf(_jconf=context.getConf()))
    # pyspark's SIGINT handler cancels every job of the context: the driver's jobs, not ours.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return SparkSession(sc)


class _LevelFirst(logging.Formatter):
    """A level, then the message: the plugin logs each line at that level on the driver's
    ``sparkscale`` logger, so a line reads as the in-job launch's. Other loggers' lines name them."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        named = text if record.name == LOGGER_NAME else f"{record.name}: {text}"
        return f"{record.levelname} {named}"


def _log_to_stderr() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LevelFirst())
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger(LOGGER_NAME).setLevel(logging.INFO)
