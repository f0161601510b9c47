"""Fixtures of the real-Spark files (their helpers: tests/spark_cluster.py).

Each file runs in a pytest process of its own (tests/run_suite.py, ``make test``): pyspark launches
one driver JVM per process with the first session's settings as system properties, which later
sessions of the process would read as defaults. Within a file, scenarios share one application
where Spark's own settings allow: ``cluster`` for a file (its module-level ``CLUSTER`` says how the
application is made), ``class_cluster`` for the tests of a class (the class's ``CLUSTER``), where a
file needs two applications with different Spark settings (one SparkContext per process at a time).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from kafka_broker import KafkaBroker
from spark_cluster import SharedCluster

from sparkscale_listener.testing import demo

# Waits of 10 s or more, per test, listed at the end of the file's log: where the suite's time goes.
LONG_WAIT_S = 10.0
_long_waits: list[str] = []
_seen = [0]  # demo.WAITED's length when the previous test ended

# Every cluster, broker and server of the tests stays on loopback.
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    """The file's one local-cluster application; each scenario starts with ``cluster.scenario(**keys)``."""
    with SharedCluster(tmp_path_factory.mktemp("cluster"), f"it-{request.module.__name__}",
                       **getattr(request.module, "CLUSTER", {})) as shared:
        yield shared


@pytest.fixture(scope="class")
def class_cluster(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    """The application of a test class's scenarios, made as the class's ``CLUSTER`` says."""
    assert request.cls is not None, "class_cluster serves the tests of a class"
    with SharedCluster(tmp_path_factory.mktemp("cluster"), f"it-{request.cls.__name__}",
                       **getattr(request.cls, "CLUSTER", {})) as shared:
        yield shared


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A real Kafka broker (tests/kafka_broker.py), started once for the file's scenarios."""
    with KafkaBroker(tmp_path_factory.mktemp("kafka")).start() as running:
        yield running


@pytest.fixture(autouse=True)
def _note_long_waits(request: pytest.FixtureRequest) -> Iterator[None]:
    """The test's waits (a module fixture's count for the test that set it up)."""
    yield
    for what, seconds in demo.WAITED[_seen[0]:]:
        if seconds >= LONG_WAIT_S:
            _long_waits.append(f"{seconds:6.1f}s  {request.node.name}: {what}")
    _seen[0] = len(demo.WAITED)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _long_waits:
        terminalreporter.section(f"waits of {LONG_WAIT_S:g} s or more")
        for line in _long_waits:
            terminalreporter.write_line(line)
    if demo.DECIDED:
        terminalreporter.section(f"decisions during waits of {demo.DECIDED_AFTER_S:g} s or more")
        for what, lines in demo.DECIDED:
            terminalreporter.write_line(f"{what}:")
            for line in lines:
                terminalreporter.write_line(f"  {line}")
