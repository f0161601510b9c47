"""The Autoscaler tab of the driver UI and the gauges on Spark's PrometheusServlet, on a real scaling job.

One local-cluster session serves every Spark test in this module (starting one costs ~20 s on 2 cores): a
streaming job whose load steps up until the autoscaler scales up; then the tests read the UI over HTTP, scrape
``/metrics/prometheus``, and open the page in headless Chromium (dumped DOM and a screenshot). The last test
stops that session and checks that a session without a UI gets no tab and keeps working.

Every wait is a condition with a deadline. Set ``SPARKSCALE_UI_SCREENSHOT=/some/path.png`` to keep the
screenshot. The publisher's own tests (no Spark) are in tests/test_ui.py.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkscale_listener.testing.demo import StreamingJob, build_session, cluster_conf, wait_for
from sparkscale_listener.ui import UiPublisher

GAUGE_PREFIX = "driver_plugin_io_sparkscale_bridge_SparkscalePlugin_"
PROMETHEUS_SERVLET = "org.apache.spark.metrics.sink.PrometheusServlet"
GAUGES = ("targetExecutors", "liveExecutors", "pendingExecutors", "utilization", "paused", "backlog")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")


# ---------------------------------------------------------------------------------------- Spark

@dataclass
class Env:
    spark: Any
    scaler: Any
    bridge: Any
    job: StreamingJob
    base_url: str
    workdir: Path
    scale_up: dict[str, Any]


def _assert_publisher_wired(scaler: Any) -> None:
    """autoscale() wires the UI publisher into the control loop whenever the tab is attached."""
    assert any(isinstance(o, UiPublisher) for o in scaler.observers), scaler.observers


def _get(url: str, timeout: float = 30.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8")


def _applied(scaler: Any, action: str) -> list[dict[str, Any]]:
    return [d for d in scaler.decisions() if d["applied"] and d["action"] == action]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    from py4j.java_gateway import JavaClass
    from pyspark import SparkContext

    from sparkscale_listener import autoscaler
    from sparkscale_listener.bridge import JvmBridge

    if SparkContext._jvm is not None:
        probe = SparkContext._jvm.io.sparkscale.bridge.AutoscalerTab
        if not isinstance(probe, JavaClass):
            pytest.skip("a driver JVM without the current bridge jar already runs in this process")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the UI and the cluster stay on loopback
    workdir = tmp_path_factory.mktemp("ui")
    conf = cluster_conf(workdir, extra={
        "spark.ui.enabled": "true",
        "spark.ui.port": "0",  # any free port: other processes may hold 4040
        "spark.metrics.conf.*.sink.prometheusServlet.class": PROMETHEUS_SERVLET,
        "spark.metrics.conf.*.sink.prometheusServlet.path": "/metrics/prometheus",
    })
    spark = build_session("it-ui", conf)
    job = None
    try:
        scaler = autoscaler(spark)
        bridge = JvmBridge(spark.sparkContext)
        _assert_publisher_wired(scaler)
        port = int(str(spark.sparkContext.uiWebUrl).rsplit(":", 1)[1])
        job = StreamingJob(spark, workdir, rows_per_second=30).start()
        # Only the baseline: a cold start (slow first batches) may already scale up, which is fine here.
        wait_for(lambda: scaler.status()["initial_executors"] is not None, 120, what="the executor baseline")
        job.set_rate(220)  # > 2x what one executor does: the backlog grows and the autoscaler scales up
        ups = wait_for(lambda: _applied(scaler, "scale_up"), 150, what="a scale-up under growing backlog")
        wait_for(lambda: scaler.status()["live_executors"] >= 2, 90, what="the new executors")
        # A few more ticks, so the chart shows the executors arriving, and the published document has them.
        wait_for(lambda: len(json.loads(bridge.latest_status() or "{}").get("timeline", [])) >= 12
                 and json.loads(bridge.latest_status())["status"]["live_executors"] >= 2, 60,
                 what="published status with the new executors")
        yield Env(spark, scaler, bridge, job, f"http://127.0.0.1:{port}", workdir, ups[0])
    finally:
        if job is not None:
            job.stop()
        spark.stop()


@pytest.mark.spark
def test_tab_is_in_the_navigation_bar_and_serves_the_status(env: Env) -> None:
    assert env.bridge.ui_tab_attached()
    jobs = _get(f"{env.base_url}/jobs/")
    assert re.search(r'href="[^"]*/autoscaler/"[^>]*>Autoscaler</a>', jobs), "no tab in the nav bar"
    page = _get(f"{env.base_url}/autoscaler/")
    assert 'id="sparkscale-page"' in page and 'id="sparkscale-chart-executors"' in page
    assert env.scale_up["reason"] in html.unescape(page)


@pytest.mark.spark
def test_gauges_reach_the_prometheus_servlet(env: Env) -> None:
    def scrape() -> dict[str, float]:
        values = {}
        for line in _get(f"{env.base_url}/metrics/prometheus").splitlines():
            # metrics_<app>_driver_plugin_io_sparkscale_bridge_SparkscalePlugin_targetExecutors_Value{...} 2
            match = re.match(rf"\S*{GAUGE_PREFIX}(\w+?)_(?:Value|Number)\{{[^}}]*\}} (\S+)$", line)
            if match:
                values[match.group(1)] = float(match.group(2))
        return values

    def complete() -> dict[str, float] | None:
        values = scrape()
        return values if set(GAUGES) <= set(values) and "backlog_demo" in values else None

    values = wait_for(complete, 60, what="every sparkscale gauge on /metrics/prometheus")
    assert values["paused"] == 0.0 and values["backlog"] >= 0 and values["backlog_demo"] >= 0

    def agree() -> bool:  # the gauge is set at the end of a tick; the status may move on meanwhile
        return scrape()["targetExecutors"] == float(env.scaler.status()["target_executors"])

    wait_for(agree, 60, what="targetExecutors on /metrics/prometheus equal to status()['target_executors']")


def _chromium(*args: str, timeout: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["chromium", *CHROMIUM_FLAGS, *args], capture_output=True, text=True,
                          timeout=timeout, check=True)


@pytest.mark.spark
def test_page_renders_in_chromium(env: Env, tmp_path: Path) -> None:
    if shutil.which("chromium") is None:
        pytest.skip("chromium is not on PATH: apt-get install chromium")
    profile = f"--user-data-dir={tmp_path / 'profile'}"
    jobs_dom = _chromium(profile, "--dump-dom", f"{env.base_url}/jobs/").stdout
    assert re.search(r'href="[^"]*/autoscaler/"[^>]*>Autoscaler</a>', jobs_dom), "no tab in the nav bar"

    dom = _chromium(profile, "--dump-dom", f"{env.base_url}/autoscaler/").stdout
    text = html.unescape(dom)
    assert env.scale_up["reason"] in text, "the applied decision's reason is not on the page"
    mode = re.search(r'<span id="sparkscale-mode">([^<]*)</span>', dom)
    assert mode and mode.group(1) == env.scaler.status()["mode"] == "autoscale"
    chart = re.search(r'<svg id="sparkscale-chart-executors".*?</svg>', dom, re.S)
    assert chart, "no executors chart"
    live = re.search(r'<polyline class="series-live" data-points="(\d+)"[^>]* points="([^"]+)"',
                     chart.group(0))
    assert live and int(live.group(1)) >= 3 and len(live.group(2).split()) == int(live.group(1))
    assert 'class="marker marker-scale_up"' in chart.group(0), "the scale-up is not marked on the chart"

    shot = tmp_path / "autoscaler.png"
    _chromium(profile, f"--screenshot={shot}", "--window-size=1400,1800", f"{env.base_url}/autoscaler/")
    assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    keep = os.environ.get("SPARKSCALE_UI_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


@pytest.mark.spark
def test_no_ui_means_no_tab_and_the_autoscaler_still_runs(env: Env) -> None:
    from sparkscale_listener import autoscale, autoscaler
    from sparkscale_listener.bridge import JvmBridge

    env.job.stop()
    env.spark.stop()  # this module's shared session ends here: this test runs last
    from pyspark.sql import SparkSession

    spark = autoscale(SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false"))
    try:
        bridge = JvmBridge(spark.sparkContext)
        assert bridge.installed() and not bridge.ui_tab_attached()
        assert autoscaler(spark).status()["mode"] == "recommend"  # local master: runs, never applies
    finally:
        spark.stop()
