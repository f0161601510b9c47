"""The agent's own parts that need no driver (its run on a Spark Connect server is
tests/integration/test_server_side_launch.py)."""

from __future__ import annotations

import argparse
import io
import json
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
        assert agent.run(argparse.Namespace(check=False)) == agent.CONFIGURATION_REFUSED
    finally:
        root.handlers[:] = handlers
        root.setLevel(levels[0])
        own.setLevel(levels[1])


def checked(conf: object, caplog: pytest.LogCaptureFixture) -> tuple[int, str]:
    with caplog.at_level(logging.ERROR, logger="sparkscale"):
        code = agent.check(io.StringIO(json.dumps(conf)))
    return code, caplog.text


def test_the_check_at_the_drivers_start_accepts_what_the_in_job_launch_accepts(
        caplog: pytest.LogCaptureFixture) -> None:
    conf = {"spark.sparkscale.launch": "agent", "spark.sparkscale.maxExecutors": "4"}
    assert checked(conf, caplog) == (0, "")


@pytest.mark.parametrize(("conf", "said"), [
    ({"spark.sparkscale.maxExecutors": "many"}, "spark.sparkscale.maxExecutors"),
    ({"spark.sparkscale.launch": "agent", "spark.dynamicAllocation.enabled": "true"},
     "spark.dynamicAllocation.enabled=true"),
    ({"spark.sparkscale.stateStore": "sqlite"}, "stateStore.sqlite.path"),
])
def test_the_check_refuses_with_the_in_job_launchs_message(conf: dict[str, str], said: str,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    code, text = checked(conf, caplog)
    assert code == agent.CONFIGURATION_REFUSED
    assert said in text


def test_the_check_says_what_it_needs_when_its_input_is_not_a_conf(caplog: pytest.LogCaptureFixture) -> None:
    code, text = checked(["spark.master"], caplog)
    assert code == 1 and "JSON object" in text
