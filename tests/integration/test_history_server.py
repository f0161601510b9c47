"""The Autoscaler tab in the Spark History Server, rebuilt from a real job's event log.

One job (the module's first fixture) on a local-cluster: the load steps up until the autoscaler
scales up; the executor that scale-up adds fails every task (the test source's fault injection;
Spark retries each on the other executor), so the taskFailures checker rolls the scale-up back,
the failing executor is removed and scaling pauses, while the query goes on and loses no row (the
rollback checkers' case 1 on real Spark). The job runs without a driver UI (the tick summaries reach
the event log all the same) and with Spark 4's default event log: rolling and zstd-compressed. Then:

- the README's one-liner loads the decisions from that log into a DataFrame;
- a real History Server (pyspark's own ``spark-class``, on loopback and a free port, the bridge
  jar on ``SPARK_DAEMON_CLASSPATH``, its store on disk) serves the application's Autoscaler tab,
  fetched over HTTP and rendered in headless Chromium, and its content is checked against the
  job's events;
- an application without autoscaler events, in the same log directory, gets no tab;
- the History Servers of Spark 3.5.7 and 4.0.1, with their lines' jars, show the tab too.

Every wait is a condition with a deadline.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tab_schema
from browser import dump_dom
from spark_cluster import FAST, TEST_JVM_OPTIONS, fast_conf

from sparkscale_listener import autoscaler
from sparkscale_listener.spark import jars as bridge_jars
from sparkscale_listener.testing import source as testing_source
from sparkscale_listener.testing.demo import StreamingJob, build_session, cost_learned, exactly_once, wait_for

pytestmark = pytest.mark.spark
REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# The other supported lines, each with the jar of its own (as in test_spark_versions).
OLDER_LINES = {"3.5.7": "2.12", "4.0.1": "2.13"}
# The job's tick summaries in the event log: one every 6 ticks of the tests' 1 s interval.
TICK_INTERVAL_S = 6
KEPT_EVENTS = ("SparkListenerLogStart", "SparkListenerApplicationStart", "SparkListenerApplicationEnd",
               "io.sparkscale.bridge.ScalingEvent", "io.sparkscale.bridge.AutoscalerEvent",
               "io.sparkscale.bridge.AutoscalerTick")


@dataclass
class Job:
    app_id: str
    events_dir: Path
    event_log: Path  # the application's log: a directory of rolling files
    decisions: list[dict[str, Any]]  # scaler.decisions() at the end
    status: dict[str, Any]
    good: int  # the executor of the baseline: the executors added later fail every task
    survivors: list[int]  # the executors once the rollback was done
    out_dir: Path  # the query's file sink


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    workdir = tmp_path_factory.mktemp("history-job")
    conf = fast_conf(workdir, workers=2, extra={
        "spark.ui.enabled": "false",
        "spark.eventLog.compress": "true",  # Spark 4's default (zstd), which the demo's settings turn off
        "spark.sparkscale.maxExecutors": "2",
        "spark.sparkscale.events.tickInterval": f"{TICK_INTERVAL_S}s",  # throttling shows in the counts
        "spark.sparkscale.checkers.taskFailures.window": "30s",
        "spark.sparkscale.rollback.pauseDuration": "10min",
        # A failed task is retried on another executor, the failing one is never excluded, so it goes
        # on failing until the rollback removes it (and no row is lost).
        "spark.excludeOnFailure.enabled": "true",
        "spark.excludeOnFailure.stage.maxFailedTasksPerExecutor": "100000",
        "spark.excludeOnFailure.application.maxFailedTasksPerExecutor": "100000",
        "spark.task.maxFailures": "8",
    })
    spark = build_session("it-history", conf)
    scaler = autoscaler(spark)
    stream = None
    try:
        app_id = spark.sparkContext.applicationId

        def executor_ids() -> list[int]:
            text = spark.sparkContext._jsc.sc().getExecutorIds().mkString(",")
            return sorted(int(e) for e in text.split(",") if e)

        wait_for(lambda: scaler.status()["initial_executors"] is not None and len(executor_ids()) == 1, 120,
                 what="the baseline of 1 executor")
        good = max(executor_ids())
        # Batches of at most 150 rows (not 400): ~2 s each on the one executor left after the
        # rollback instead of ~5, so the two batches awaited while paused come sooner; 220 rows/s
        # still needs more than one executor, and the low rate's 30 rows stay below the cap.
        stream = StreamingJob(spark, workdir, rows_per_second=30, max_rows_per_batch=150,
                              source_options={"failOnExecutorsAbove": str(good)}).start()
        # Learnt at the low rate's short batches (on 1 executor the high rate's take ~2 s each).
        wait_for(lambda: cost_learned(scaler), 120, what="the model of the query's batch cost")
        stream.set_rate(220)
        wait_for(lambda: [d for d in scaler.decisions() if d["action"] == "rollback"], 240,
                 what="a scale-up, then its rollback by taskFailures")
        wait_for(lambda: scaler.status()["paused"], 30, what="the pause after the rollback")
        # The rollback removes the executor the scale-up added; the query goes on, on the good one.
        wait_for(lambda: executor_ids() == [good], 120, what=f"only the good executor {good} left")
        survivors = executor_ids()
        done, ticks = stream.query.lastProgress["batchId"], len(scaler.decisions())
        wait_for(lambda: stream.query.lastProgress["batchId"] >= done + 2
                 and len(scaler.decisions()) >= ticks + 3, 90,
                 what="two more batches and three ticks while paused")
        decisions, status = scaler.decisions(), scaler.status()
    finally:
        if stream is not None:
            stream.stop()
        spark.stop()
    logs = [p for p in (workdir / "events").iterdir() if app_id in p.name]
    assert len(logs) == 1 and logs[0].is_dir(), logs  # Spark 4 rolls event logs by default
    return Job(app_id, workdir / "events", logs[0], decisions, status, good, survivors, stream.out_dir)


def readme_one_liner() -> str:
    """The README's Python block that loads the decisions from an event log (needs ``spark`` and
    ``event_log``)."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if "event_log" in b and "io.sparkscale.bridge.ScalingEvent" in b]
    assert len(found) == 1, "the README documents one line that reads the decisions from an event log"
    return found[0]


@pytest.fixture(scope="module")
def logged(job: Job) -> dict[str, Any]:
    """The job's event log read back with Spark, in a second (plain local) session, which itself
    writes an event log without autoscaler events next to the job's."""
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[1]").appName("it-history-reader")
             .config("spark.ui.enabled", "false").config("spark.eventLog.enabled", "true")
             .config("spark.eventLog.dir", str(job.events_dir)).getOrCreate())
    try:
        scope: dict[str, Any] = {"spark": spark, "event_log": str(job.event_log)}
        exec(readme_one_liner(), scope)  # the documented line, as written
        rows = [r.asDict() for r in scope["decisions"].collect()]
        lines = (spark.read.text(str(job.event_log))
                 .selectExpr("value", "get_json_object(value, '$.Event') AS event"))
        counts = {row["event"]: row["count"] for row in lines.groupBy("event").count().collect()}
        # The application's lifecycle and the autoscaler's events, in the log's order (one small file: one
        # partition), for the older lines' History Servers, which may not read all of Spark 4.3's events.
        kept = lines.where(f"event IN {KEPT_EVENTS}").select("value").collect()
        # The job's sink (through its own log: committed files only).
        ids = [r.id for r in spark.read.schema(testing_source.SCHEMA).json(str(job.out_dir)).collect()]
        reader_id = spark.sparkContext.applicationId
    finally:
        spark.stop()
    return {"decisions": rows, "counts": counts, "reader_id": reader_id, "kept": [r.value for r in kept],
            "ids": ids}


def test_the_rollback_removed_the_failing_executor_and_the_query_lost_no_row(
        job: Job, logged: dict[str, Any]) -> None:
    rollback = next(d for d in job.decisions if d["action"] == "rollback")
    assert rollback["applied"] and "taskFailures" in rollback["reason"], rollback
    assert (rollback["from_executors"], rollback["to_executors"]) == (2, 1), rollback
    # The executor the scale-up added (the failing one) was the one removed.
    assert job.survivors == [job.good], (job.survivors, job.good)
    assert job.status["paused"] and "taskFailures" in job.status["pause_reason"], job.status
    assert job.status["target_executors"] == 1 and job.status["healthy_target"] == 1, job.status
    # No scaling while paused; the query went on (two batches after the rollback), and every row
    # reached the sink once, the failed tasks' rows included.
    after = [d for d in job.decisions if d["applied"] and d["time"] > rollback["time"]]
    assert not [d for d in after if d["action"] in ("scale_up", "scale_down")], after
    assert logged["ids"] and exactly_once(logged["ids"]), len(logged["ids"])


def test_the_readme_one_liner_loads_the_decisions_into_a_dataframe(job: Job, logged: dict[str, Any]) -> None:
    expected = [(d["action"], d["from_executors"], d["to_executors"], d["applied"], d["reason"])
                for d in job.decisions if d["applied"] and d["action"] != "none"]
    assert [a for a, *_ in expected][:1] == ["scale_up"] and "rollback" in [a for a, *_ in expected], expected
    got = [(r["action"], r["fromExecutors"], r["toExecutors"], r["applied"], r["reason"])
           for r in logged["decisions"]]
    assert got == expected
    times = [r["time"] for r in logged["decisions"]]
    assert all(times) and times == sorted(times)


# ---------------------------------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 120.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode("utf-8")


@dataclass
class HistoryServer:
    url: str
    log: Path


@contextlib.contextmanager
def history_server(spark_home: Path, log_dir: Path, jar: Path, workdir: Path,
                   store: Path | None = None) -> Iterator[HistoryServer]:
    """A History Server process of the Spark in ``spark_home`` on ``log_dir``, with ``jar`` on its
    classpath as the README says, keeping applications in memory or, with ``store``, on disk (as
    production servers do: Jackson then writes and reads every record); entered once it serves."""
    log = workdir / "history-server.log"
    env = {**os.environ, "SPARK_HOME": str(spark_home), "SPARK_DAEMON_CLASSPATH": str(jar),
           "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "512m",
           "SPARK_HISTORY_OPTS": " ".join([
               TEST_JVM_OPTIONS,
               f"-Dspark.history.fs.logDirectory={log_dir.as_uri()}",
               f"-Dspark.history.ui.port={_free_port()}",  # taken meanwhile: it tries the next ones
               "-Dspark.history.fs.update.interval=1s",
               *([f"-Dspark.history.store.path={store}"] if store is not None else [])])}
    with log.open("wb") as out:
        proc = subprocess.Popen([str(spark_home / "bin" / "spark-class"),
                                 "org.apache.spark.deploy.history.HistoryServer"],
                                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    try:
        def bound() -> str | None:
            assert proc.poll() is None, f"the History Server exited:\n{log.read_text()[-3000:]}"
            match = re.search(r"Bound HistoryServer to \S+, and started at (http://\S+)", log.read_text())
            return match.group(1) if match else None

        url = wait_for(bound, 120, what="the History Server to listen")
        # The server listens on loopback only, whatever host name its message gives.
        yield HistoryServer(re.sub(r"//[^:/]+", "//127.0.0.1", url, count=1).rstrip("/"), log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=60)


def pyspark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@pytest.fixture(scope="module")
def server(job: Job, logged: dict[str, Any],
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[HistoryServer]:
    jar = bridge_jars.bridge_jar()  # the jar of this Spark, as the README tells users to pick it
    workdir = tmp_path_factory.mktemp("hs")
    with history_server(pyspark_home(), job.events_dir, jar, workdir, store=workdir / "store") as running:
        yield running


def _listed(server: HistoryServer, *app_ids: str) -> bool:
    try:
        apps = json.loads(_get(f"{server.url}/api/v1/applications", timeout=30))
    except (urllib.error.URLError, TimeoutError, ConnectionError):
        return False
    return set(app_ids) <= {a["id"] for a in apps}


def embedded_document(page: str) -> dict[str, Any]:
    """The document the page's script renders, as the page carries it (JSON data in a script element)."""
    match = re.search(r'<script type="application/json" id="sparkscale-document">(.*?)</script>', page, re.S)
    assert match, "the page carries no document"
    return json.loads(match.group(1))


def test_the_history_server_shows_the_autoscaler_tab(job: Job, logged: dict[str, Any],
                                                     server: HistoryServer) -> None:
    wait_for(lambda: _listed(server, job.app_id), 120, what="the History Server to list the application")
    page = _get(f"{server.url}/history/{job.app_id}/autoscaler/")
    assert re.search(r'href="[^"]*/autoscaler/"[^>]*>Autoscaler</a>', page), "no tab in the nav bar"
    assert 'data-source="event-log"' in page
    assert "Drop unrecognized event" not in server.log.read_text()
    document = embedded_document(page)
    assert tab_schema.errors(document, "document") == []
    assert document["source"] == "event-log" and document["ended"] is not None

    # Every applied action and its reason, as the job decided them, in order.
    applied = [(d["action"], d["reason"]) for d in job.decisions if d["applied"] and d["action"] != "none"]
    assert [(d["action"], d["reason"]) for d in document["decisions"] if d["applied"]] == applied
    actions = [d["action"] for d in document["decisions"]]
    assert actions.count("scale_up") >= 1 and actions.count("rollback") == 1 and "none" in actions, actions
    # Every decision to do nothing is counted once, in the runs between the actions, but for those after
    # the last tick summary kept: at most tickInterval / interval of them (6 s / the tests' 1 s).
    nones = sum(1 for d in job.decisions if d["action"] == "none")
    runs = sum(d["count"] for d in document["decisions"] if d["action"] == "none")
    unlogged = round(TICK_INTERVAL_S / float(FAST["spark.sparkscale.interval"].rstrip("s")))
    assert nones - unlogged <= runs <= nones, (runs, nones)
    assert "pause" in [e["kind"] for e in document["events"]]
    status = document["status"]
    assert status["paused"] and status["pause_reason"] == job.status["pause_reason"]
    assert status["mode"] == "autoscale" and status["target_executors"] == job.status["target_executors"]

    # The document counts exactly the events the log holds.
    counts = logged["counts"]
    assert document["counts"] == {"ticks": counts["io.sparkscale.bridge.AutoscalerTick"],
                                  "scalings": counts["io.sparkscale.bridge.ScalingEvent"],
                                  "events": counts["io.sparkscale.bridge.AutoscalerEvent"]}
    # Every tick was posted (the job had no UI, but ticks due for the log are posted all the same); the
    # log kept fewer than one per tick, and at least one per change of executors.
    assert 3 <= counts["io.sparkscale.bridge.AutoscalerTick"] < len(job.decisions)


def assert_rendered(dom: str, job: Job) -> None:
    """The page as the browser shows it, after its script ran (with the History Server's own d3)."""
    text = html.unescape(dom)
    rollback = next(d for d in job.decisions if d["action"] == "rollback")
    assert rollback["reason"] in text
    chart = re.search(r'<svg id="sparkscale-chart-executors".*?</svg>', dom, re.S)
    assert chart, "no executors chart"
    live = re.search(r'<path class="series series-live" data-points="(\d+)" d="M[^"]+"', chart.group(0))
    assert live and int(live.group(1)) >= 3, "no line of live executors"
    for action in ("scale_up", "rollback"):
        assert f'class="marker marker-{action}"' in chart.group(0), f"no {action} on the chart"
    # The time axis spans the job, not an instant (times are kept exact in the tick events).
    axis = re.search(r'<g class="axis axis-time".*?</g>\s*<g class="axis axis-left"', chart.group(0), re.S)
    ticks = re.findall(r"<text[^>]*>(\d\d:\d\d(?::\d\d)?)</text>", axis.group(0)) if axis else []
    assert len(set(ticks)) >= 2, ticks
    backlog = re.search(r'<svg id="sparkscale-chart-backlog".*?</svg>', dom, re.S)
    assert backlog and 'class="series series-backlog"' in backlog.group(0)
    assert re.search(r'<table[^>]*id="sparkscale-queries".*?<strong>demo</strong>', dom, re.S)
    rows = re.findall(r'<tr class="sparkscale-decision sparkscale-(\w+)', dom)
    assert rows.count("rollback") == 1 and "scale_up" in rows and "none" in rows, rows
    assert re.search(r'<tr class="sparkscale-event sparkscale-event-pause', dom), "no pause in the events"
    paused = re.search(r'<span id="sparkscale-paused">(.*?)</span></li>', dom, re.S)
    assert paused and "paused" in paused.group(1), paused


def test_the_tab_renders_in_chromium(job: Job, server: HistoryServer, tmp_path: Path) -> None:
    wait_for(lambda: _listed(server, job.app_id), 120, what="the History Server to list the application")
    assert_rendered(dump_dom(tmp_path / "profile", f"{server.url}/history/{job.app_id}/autoscaler/"), job)


def test_an_application_without_autoscaler_events_has_no_tab(logged: dict[str, Any],
                                                              server: HistoryServer) -> None:
    reader = logged["reader_id"]
    wait_for(lambda: _listed(server, reader), 120, what="the History Server to list the reader application")
    jobs = _get(f"{server.url}/history/{reader}/jobs/")
    assert "/environment/" in jobs and "Autoscaler</a>" not in jobs
    # The History Server answers a path an application does not have with its jobs page.
    assert 'id="sparkscale-page"' not in _get(f"{server.url}/history/{reader}/autoscaler/")


@pytest.mark.parametrize("version", list(OLDER_LINES))
def test_the_older_lines_history_servers_show_the_tab_too(version: str, job: Job, logged: dict[str, Any],
                                                          tmp_path: Path) -> None:
    """The History Server of Spark 3.5 (javax servlets, Scala 2.12, d3 3.x) and 4.0 (Jetty 11) with
    their own jar and a store on disk, on the job's lifecycle and autoscaler events (an event log of
    Spark 4.3 holds events that an older History Server does not know), rendered in Chromium."""
    from test_spark_versions import python_with_pyspark  # the same virtualenvs, made once

    where = "import os, pyspark; print(os.path.dirname(pyspark.__file__))"
    home = Path(subprocess.run([python_with_pyspark(version), "-c", where], capture_output=True, text=True,
                               check=True).stdout.strip())
    log_dir = tmp_path / "events"
    log_dir.mkdir()
    (log_dir / job.app_id).write_text("\n".join(logged["kept"]) + "\n", encoding="utf-8")
    jar = bridge_jars.jar_path(version, OLDER_LINES[version])
    with history_server(home, log_dir, jar, tmp_path, store=tmp_path / "store") as server:
        wait_for(lambda: _listed(server, job.app_id), 120, what=f"Spark {version}'s History Server")
        url = f"{server.url}/history/{job.app_id}/autoscaler/"
        assert tab_schema.errors(embedded_document(_get(url)), "document") == []
        assert_rendered(dump_dom(tmp_path / "profile", url), job)
        assert "Drop unrecognized event" not in server.log.read_text()
