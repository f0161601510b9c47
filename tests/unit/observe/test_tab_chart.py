"""The Autoscaler tab's chart, drawn by the page's own script in headless Chromium from a document
built here (no Spark, no JVM): the page is put together as PageFrame.java puts it (the stylesheet, the
document as JSON data, Spark's d3 and the script modules in PageFrame.SCRIPT_MODULES' order), so a
chart of any content costs one browser start, not a job. The tabs of real jobs are rendered in
tests/integration/test_ui_and_metrics.py and test_history_server.py."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any

import tab_schema
from browser import dump_dom, require_chromium

REPO = Path(__file__).resolve().parents[3]
TAB = tab_schema.SCHEMA_PATH.parent
PAGE_FRAME = REPO / "jvm-bridge" / "src" / "main" / "java" / "io" / "sparkscale" / "bridge" / "PageFrame.java"
T0 = 1_767_225_600.0


def script_modules() -> list[str]:
    """PageFrame.SCRIPT_MODULES, read from its source: the order the page runs its script in."""
    declared = re.search(r"SCRIPT_MODULES = List\.of\((.*?)\);", PAGE_FRAME.read_text(encoding="utf-8"), re.S)
    assert declared, "PageFrame.SCRIPT_MODULES not found"
    return re.findall(r'"([\w-]+\.js)"', declared.group(1))


def spark_d3() -> bytes:
    """The d3 Spark's UI serves (/static/d3.min.js), from pyspark's spark-core jar."""
    import pyspark

    core = next((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    with zipfile.ZipFile(core) as jar:
        return jar.read("org/apache/spark/ui/static/d3.min.js")


def render(document: dict[str, Any], workdir: Path) -> str:
    """The page's DOM once its script drew ``document`` (as the History Server's page: no refreshing)."""
    (workdir / "d3.min.js").write_bytes(spark_d3())
    scripts = "".join(f"<script>{(TAB / name).read_text(encoding='utf-8')}</script>"
                      for name in script_modules())
    data = json.dumps(document).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    server_ms = int(document["published"] * 1000)
    page = workdir / "autoscaler.html"
    page.write_text(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>"
        + (TAB / "autoscaler-tab.css").read_text(encoding="utf-8") + "</style></head><body>"
        + f'<div id="sparkscale-page" data-source="event-log" data-server-ms="{server_ms}"></div>'
        + '<p id="sparkscale-refresh-note"></p>'
        + f'<script type="application/json" id="sparkscale-document">{data}</script>'
        + '<script src="d3.min.js"></script>' + scripts + "</body></html>", encoding="utf-8")
    return dump_dom(workdir / "profile", page.as_uri())


def document(timeline: list[dict[str, Any]]) -> dict[str, Any]:
    """A History Server's document of one query around ``timeline``."""
    return {
        "version": 2, "source": "event-log", "published": timeline[-1]["t"], "ended": timeline[-1]["t"],
        "config": {"interval_s": 10, "min_executors": 1, "max_executors": 4, "utilization_max": 0.9,
                   "utilization_target": 0.7},
        "status": {"mode": "autoscale", "target_executors": 2, "live_executors": 2, "pending_executors": 0,
                   "paused": False, "stopped": False, "pause_reason": None, "utilization": 0.5,
                   "provisioning_time_s": 20.0, "errors": 0, "last_error": None, "blocked_queries": {},
                   "last_scaling": None},
        "queries": [], "decisions": [], "events": [], "timeline": timeline,
        "counts": {"ticks": len(timeline), "scalings": 0, "events": 0},
    }


def test_the_rates_chart_draws_the_forecast_beside_the_load_shadow_and_applied_apart(tmp_path: Path) -> None:
    require_chromium()

    def point(i: int, **forecast: Any) -> dict[str, Any]:
        return {"t": T0 + 10 * i, "live": 2, "target": 2, "input_rate": 50.0, "processed_rate": 48.0,
                "arrival_rate": 50.0, "backlog": 10.0, "utilization": 0.5, "queries": {"orders": 0.5},
                **forecast}

    # Two points of an older version's event log (no forecast_rate), one without a forecast yet, three
    # in shadow, two applied.
    timeline = ([point(0), point(1), point(2, forecast_rate=None)]
                + [point(i, forecast_rate=100.0 + 10 * i) for i in (3, 4, 5)]
                + [point(i, forecast_rate=100.0 + 10 * i, forecast_applied=True) for i in (6, 7)])
    with_forecast = document(timeline)
    assert tab_schema.errors(with_forecast, "document") == []
    dom = render(with_forecast, tmp_path)

    chart = re.search(r'<svg id="sparkscale-chart-executors".*?</svg>', dom, re.S)
    assert chart, "no executors chart"
    lines = {m.group(1): (int(m.group(2)), m.group(3)) for m in re.finditer(
        r'<path class="series series-forecast series-forecast-(\w+)" data-points="(\d+)" d="M[^"]+"'
        r'[^>]*stroke-dasharray="([^"]+)"', chart.group(0))}
    assert lines == {"shadow": (3, "6 3"), "applied": (2, "6 3")}, lines
    assert "forecast rows/s (applied), right axis" in dom
    assert "forecast rows/s (shadow: not applied), right axis" in dom
    # The right axis reaches the forecast's 170 rows/s, not only the load's 50.
    right = re.search(r'<g class="axis axis-right".*?</g>\s*<text', chart.group(0), re.S)
    assert right and max(int(v) for v in re.findall(r">(\d+)</text>", right.group(0))) >= 150
    backlog = re.search(r'<svg id="sparkscale-chart-backlog".*?</svg>', dom, re.S)
    assert backlog and "series-forecast" not in backlog.group(0)
