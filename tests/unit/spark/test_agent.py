"""The agent's own parts that need no driver (its run on a Spark Connect server is
tests/integration/test_server_side_launch.py)."""

from __future__ import annotations

import argparse
import logging

import pytest

from sparkscale_listener.spark import agent


def line(name: str, level: int, message: str) -> str:
    return agent._LevelFirst().format(logging.LogRecord(name, level, __file__, 1, message, None, None))


def test_a_line_starts_with_its_level_for_the_plugin_and_names_loggers_other_than_sparkscale() -> None:
    assert line("sparkscale", logging.INFO, "scale_up 1 -> 3: ...") == "INFO scale_up 1 -> 3: ..."
    assert line("py4j.clientserver", logging.WARNING, "closed") == "WARNING py4j.clientserver: closed"


def test_without_a_gateway_to_attach_to_the_agent_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    root, own = logging.getLogger(), logging.getLogger("sparkscale")
    handlers, levels = list(root.handlers), (root.level, own.level)
    try:
        assert agent.run(argparse.Namespace()) == agent.CONFIGURATION_REFUSED
    finally:
        root.handlers[:] = handlers
        root.setLevel(levels[0])
        own.setLevel(levels[1])
