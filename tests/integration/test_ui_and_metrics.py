"""The Autoscaler tab of the driver UI and the gauges, on a real scaling job.

One local-cluster session serves every Spark test in this module (starting one costs ~20 s on 2 cores): a
streaming job whose load steps up until the autoscaler scales up; then the tests read the UI over HTTP (the
document the page carries, checked against the tab's schema), scrape
``/metrics/prometheus`` (Spark's servlet) and ``/autoscaler/metrics`` (ours, checked with ``promtool check
metrics``), open the page in headless Chromium (dumped DOM, a screenshot, and a page driven over the DevTools
protocol that must refresh itself), start a second query with a hostile name (escaped everywhere), stop the
query (its gauges must go), and stop the session (the open page must say it stopped refreshing). The last test
checks that a session without a UI gets no tab and keeps working.

Every wait is a condition with a deadline. ``SPARKSCALE_UI_SCREENSHOT=docs/autoscaler-tab.png`` keeps the
screenshot (that is how the README's picture is made; it is taken before the hostile query starts, so the
picture shows the job alone). The tick summaries' own tests (no Spark) are in
tests/unit/observe/test_ui.py, the document builder's in jvm-bridge/src/test (JUnit), the gauges' in
tests/unit/observe/test_gauges.py;
the History Server's tab is in test_history_server.py.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tab_schema
from browser import DevToolsPage, dump_dom
from spark_cluster import fast_conf

from sparkscale_listener.observe.gauges import FORECAST_GAUGES, GAUGES
from sparkscale_listener.observe.ui import UiPublisher
from sparkscale_listener.testing.demo import StreamingJob, build_session, cost_learned, wait_for

GAUGE_PREFIX = "driver_plugin_io_sparkscale_bridge_SparkscalePlugin_"
PROMETHEUS_SERVLET = "org.apache.spark.metrics.sink.PrometheusServlet"
QUERY = "demo"
# A second, quiet query whose name would break out of HTML, a <script> block, JSON or a metric name if
# any of them took it raw (started by its own test, after the screenshot).
HOSTILE = """q<script>alert("x'1")</script>&amp;.a,b:c=d"""


# The gauges a query of a few minutes has: all but its forecast's (it learns its period over periods).
PUBLISHED = [g for g in GAUGES if g.name not in FORECAST_GAUGES]


def spark_gauge_names(query: str) -> set[str]:
    """Every gauge published here, as Spark's servlet names it (anything but letters and digits becomes _)."""
    return {re.sub(r"[^a-zA-Z0-9]", "_", g.metric_name(query)) for g in PUBLISHED}


def promtool() -> str:
    """promtool on PATH, or where `make promtool` puts it (beside this Python); else skip."""
    path = shutil.which("promtool") or shutil.which("promtool", path=str(Path(sys.executable).parent))
    if path is None:
        pytest.skip("promtool not found: `make promtool` copies it into the venv from Debian's prometheus "
                    "package (apt-get download prometheus)")
    return path


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


def embedded_document(page: str) -> dict[str, Any]:
    """The document the page's script renders, as the page carries it (JSON data in a script element)."""
    match = re.search(r'<script type="application/json" id="sparkscale-document">(.*?)</script>', page, re.S)
    assert match, "the page carries no document"
    return json.loads(match.group(1))


def _applied(scaler: Any, action: str) -> list[dict[str, Any]]:
    return [d for d in scaler.decisions() if d["applied"] and d["action"] == action]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    from py4j.java_gateway import JavaClass
    from pyspark import SparkContext

    from sparkscale_listener import autoscaler
    from sparkscale_listener.spark.bridge import JvmBridge

    if SparkContext._jvm is not None:
        probe = SparkContext._jvm.io.sparkscale.bridge.AutoscalerTab
        if not isinstance(probe, JavaClass):
            pytest.skip("a driver JVM without the current bridge jar already runs in this process")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the UI and the cluster stay on loopback
    workdir = tmp_path_factory.mktemp("ui")
    # 2 workers and a scale-up to 2 are all the tests need: a third worker's and executor's JVM
    # only took CPU from the driver while the session started and scaled up on 2 cores.
    conf = fast_conf(workdir, workers=2, extra={
        "spark.sparkscale.maxExecutors": "2",
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
        # Learnt at the low rate's short batches (on 1 executor the high rate's take ~4 s each).
        wait_for(lambda: cost_learned(scaler), 120, what="the model of the queries' batch cost")
        job.set_rate(220)  # > 2x what one executor does: the backlog grows and the autoscaler scales up
        ups = wait_for(lambda: _applied(scaler, "scale_up"), 150, what="a scale-up under growing backlog")
        wait_for(lambda: scaler.status()["live_executors"] >= 2, 90, what="the new executors")
        # A few more ticks, so the chart shows the executors arriving, and the tab's document has them.
        wait_for(lambda: len(json.loads(bridge.tab_document() or "{}").get("timeline", [])) >= 12
                 and json.loads(bridge.tab_document())["status"]["live_executors"] >= 2, 60,
                 what="the tab's document with the new executors")
        yield Env(spark, scaler, bridge, job, f"http://127.0.0.1:{port}", workdir, ups[0])
    finally:
        if job is not None:
            job.stop()
        spark.stop()


@pytest.fixture(scope="module")
def hostile(env: Env) -> Iterator[StreamingJob]:
    """The hostile-named query, running and in the tab's document."""
    job = StreamingJob(env.spark, env.workdir, name="hostile", query_name=HOSTILE, rows_per_second=2,
                       partitions=1).start()
    try:
        def listed() -> bool:
            document = json.loads(env.bridge.tab_document() or "{}")
            return HOSTILE in [q["name"] for q in document.get("queries", [])]

        wait_for(listed, 90, what="the hostile query in the tab's document")
        yield job
    finally:
        job.stop()


@pytest.mark.spark
def test_tab_is_in_the_navigation_bar_and_serves_the_status(env: Env) -> None:
    assert env.bridge.ui_tab_attached()
    jobs = _get(f"{env.base_url}/jobs/")
    assert re.search(r'href="[^"]*/autoscaler/"[^>]*>Autoscaler</a>', jobs), "no tab in the nav bar"
    page = _get(f"{env.base_url}/autoscaler/")
    assert 'id="sparkscale-page" data-source="live"' in page and "/static/d3.min.js" in page
    document = embedded_document(page)
    assert tab_schema.errors(document, "document") == []
    assert env.scale_up["reason"] in [d["reason"] for d in document["decisions"] if d["action"] == "scale_up"]
    # Every tick reaches the live tab, not only the ones the event log keeps (one a minute, and the changes).
    assert document["counts"]["ticks"] >= 12 and document["source"] == "live"


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
        return values if spark_gauge_names(QUERY) <= set(values) else None

    values = wait_for(complete, 60, what="every sparkscale gauge on /metrics/prometheus")
    assert values["paused"] == 0.0 and values["backlog"] >= 0 and values[f"query_{QUERY}_backlogRows"] >= 0
    assert values["lastTickTime"] > 1.7e9  # Unix time

    def agree() -> bool:  # the gauge is set at the end of a tick; the status may move on meanwhile
        return scrape()["targetExecutors"] == float(env.scaler.status()["target_executors"])

    wait_for(agree, 60, what="targetExecutors on /metrics/prometheus equal to status()['target_executors']")


def _metrics(env: Env) -> tuple[str, str]:
    with urllib.request.urlopen(f"{env.base_url}/autoscaler/metrics", timeout=30) as response:
        return response.headers.get("Content-Type", ""), response.read().decode("utf-8")


@pytest.mark.spark
def test_the_autoscaler_metrics_endpoint_passes_promtool(env: Env) -> None:
    def complete() -> str | None:
        text = _metrics(env)[1]
        return text if all(f"# HELP {g.prometheus} " in text for g in PUBLISHED) else None

    text = wait_for(complete, 60, what="every gauge family on /autoscaler/metrics")
    content_type, _ = _metrics(env)
    assert content_type.startswith("text/plain; version=0.0.4")
    assert re.search(rf'^sparkscale_query_backlog_rows{{query="{QUERY}"}} \d', text, re.M)
    target = re.search(r"^sparkscale_target_executors (\S+)$", text, re.M)
    assert target and float(target.group(1)) >= 2  # the scale-up
    check = subprocess.run([promtool(), "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0 and not (check.stdout + check.stderr).strip(), check

    # Why the endpoint exists: Spark's own servlet output for the same gauges fails the same check.
    ours = "\n".join(line for line in _get(f"{env.base_url}/metrics/prometheus").splitlines()
                     if GAUGE_PREFIX in line) + "\n"
    spark = subprocess.run([promtool(), "check", "metrics"], input=ours, capture_output=True, text=True,
                           timeout=60)
    assert spark.returncode != 0 and "no help text" in spark.stdout + spark.stderr


@pytest.mark.spark
def test_page_renders_in_chromium(env: Env, tmp_path: Path) -> None:
    jobs_dom = dump_dom(tmp_path / "profile", f"{env.base_url}/jobs/")
    assert re.search(r'href="[^"]*/autoscaler/"[^>]*>Autoscaler</a>', jobs_dom), "no tab in the nav bar"

    dom = dump_dom(tmp_path / "profile", f"{env.base_url}/autoscaler/")
    text = html.unescape(dom)
    assert env.scale_up["reason"] in text, "the applied decision's reason is not on the page"
    mode = re.search(r'<span id="sparkscale-mode">([^<]*)</span>', dom)
    assert mode and mode.group(1) == env.scaler.status()["mode"] == "autoscale"
    chart = re.search(r'<svg id="sparkscale-chart-executors".*?</svg>', dom, re.S)
    assert chart, "no executors chart"
    # Drawn by d3 (Spark's own copy): the live executors' step line through every tick, the scale-up marked.
    live = re.search(r'<path class="series series-live" data-points="(\d+)" d="M[^"]+"', chart.group(0))
    assert live and int(live.group(1)) >= 12, "no line of live executors"
    assert 'class="marker marker-scale_up"' in chart.group(0), "the scale-up is not marked on the chart"
    # Every point carries the forecast (Python posts it, the JVM passes it on) and the dashed line is drawn
    # exactly when one is known: a few minutes teach no period, so usually none (the line itself is checked
    # on a static page in tests/unit/observe/test_tab_chart.py).
    timeline = embedded_document(dom)["timeline"]
    assert all("forecast_rate" in p for p in timeline), timeline[-1]
    forecast = any(p["forecast_rate"] is not None for p in timeline)
    assert ("series-forecast" in chart.group(0)) == forecast
    assert re.search(r'<svg id="sparkscale-chart-backlog".*?class="series series-backlog"', dom, re.S)
    rows = re.findall(r'<tr class="sparkscale-decision sparkscale-(\w+)', dom)
    assert "scale_up" in rows, rows


@pytest.mark.spark
def test_the_open_page_refreshes_itself_and_shows_the_last_tick(env: Env, tmp_path: Path) -> None:
    with DevToolsPage(tmp_path / "profile") as page:
        page.open(f"{env.base_url}/autoscaler/")
        first = float(page.evaluate("document.getElementById('sparkscale-page').dataset.published"))
        page.evaluate("window.sparkscaleMarker = 'not reloaded'")
        # The next control tick publishes a newer status; the page fetches and swaps it in by itself.
        page.wait_for(f"Number(document.getElementById('sparkscale-page').dataset.published) > {first}"
                      " && Number(document.getElementById('sparkscale-page').dataset.refreshes) >= 1", 60,
                      "the page to show a newer status without a reload")
        assert page.evaluate("window.sparkscaleMarker") == "not reloaded"
        assert page.evaluate("document.getElementById('sparkscale-page').dataset.refreshMs") == "2000"
        last_tick = page.evaluate("document.getElementById('sparkscale-last-tick').textContent")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", last_tick), last_tick
        age = page.wait_for("/^\\d+ s ago$/.test(document.getElementById('sparkscale-tick-age').textContent)"
                            " && document.getElementById('sparkscale-tick-age').textContent", 30,
                            "the age of the last tick")
        assert int(age.split()[0]) < 60, age
        assert env.scale_up["reason"] in html.unescape(page.evaluate("document.body.innerHTML"))

        # The picture in the README: the page down to the end of the decisions table (the scale-up among
        # them), at a width the README shows without shrinking the text much (Spark's scroll buttons
        # hidden: they float over it).
        page.screenshot(tmp_path / "autoscaler.png", 1000, 900)  # lay the page out at that width
        page.evaluate("document.querySelectorAll('.scroll-btn-container').forEach(e => e.remove())")
        bottom = page.evaluate("Math.ceil(document.getElementById('sparkscale-decisions')"
                               ".getBoundingClientRect().bottom + window.scrollY) + 12")
        shot = page.screenshot(tmp_path / "autoscaler.png", 1000, int(bottom))
        assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 10_000
        keep = os.environ.get("SPARKSCALE_UI_SCREENSHOT")
        if keep:
            shutil.copyfile(tmp_path / "autoscaler.png", keep)


@pytest.mark.spark
def test_a_hostile_query_name_is_escaped_in_the_page_and_the_metrics(env: Env, hostile: StreamingJob,
                                                                     tmp_path: Path) -> None:
    page = _get(f"{env.base_url}/autoscaler/")
    assert "<script>alert(" not in page and HOSTILE not in page, "the query name reached the page raw"
    names = [q["name"] for q in embedded_document(page)["queries"]]
    assert HOSTILE in names, "the query is not in the document"
    # Rendered by the page's script: as text, not as an element.
    dom = dump_dom(tmp_path / "profile", f"{env.base_url}/autoscaler/")
    table = re.search(r'<table[^>]*id="sparkscale-queries".*?</table>', dom, re.S)
    assert table and "<script>alert(" not in table.group(0) and HOSTILE in html.unescape(table.group(0))
    label = HOSTILE.replace("\\", "\\\\").replace('"', '\\"')  # Prometheus label escaping
    wait_for(lambda: f'{{query="{label}"}}' in _metrics(env)[1], 60,
             what="the hostile query's labelled series")
    # Our name in Spark's metrics system holds letters, digits, _ and - only (JMX and Graphite
    # take it as it is); Spark's servlet then makes everything but letters and digits _.
    per_query = {name for name in spark_gauge_names(HOSTILE) if name.startswith("query_")}
    wait_for(lambda: any(f"{GAUGE_PREFIX}{name}_" in _get(f"{env.base_url}/metrics/prometheus")
                         for name in per_query), 60, what=f"one of {per_query} on /metrics/prometheus")


@pytest.mark.spark
def test_a_stopped_query_loses_its_gauges(env: Env) -> None:
    names = {f"query_{QUERY}_{g.name.rsplit('.', 1)[1]}" for g in GAUGES if g.per_query}
    servlet = f"{env.base_url}/metrics/prometheus"
    assert any(name in _get(servlet) for name in names)
    env.job.stop()

    def gone() -> bool:
        spark_text, ours = _get(servlet), _metrics(env)[1]
        return (not any(f"{GAUGE_PREFIX}{name}_" in spark_text for name in names)
                and f'query="{QUERY}"' not in ours and "sparkscale_target_executors " in ours)

    wait_for(gone, 60, what="the stopped query's gauges to leave both endpoints")
    assert f"{GAUGE_PREFIX}targetExecutors_Value" in _get(servlet)  # the application's stay


@pytest.mark.spark
def test_an_open_page_says_when_the_driver_is_gone(env: Env, tmp_path: Path) -> None:
    with DevToolsPage(tmp_path / "profile") as page:
        page.open(f"{env.base_url}/autoscaler/")
        env.spark.stop()  # this module's shared session ends here: the tests after it need none
        note = page.wait_for("document.getElementById('sparkscale-refresh-note').textContent", 60,
                             "the page to say it stopped refreshing")
        assert "stopped refreshing" in note, note


@pytest.mark.spark
def test_no_ui_means_no_tab_and_the_autoscaler_still_runs(env: Env) -> None:
    from sparkscale_listener import autoscale, autoscaler
    from sparkscale_listener.spark.bridge import JvmBridge

    env.job.stop()
    env.spark.stop()  # stopped already by the test before; this one runs last
    from pyspark.sql import SparkSession

    spark = autoscale(SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false"))
    try:
        bridge = JvmBridge(spark.sparkContext)
        assert bridge.installed() and not bridge.ui_tab_attached()
        assert autoscaler(spark).status()["mode"] == "recommend"  # local master: runs, never applies
    finally:
        spark.stop()
