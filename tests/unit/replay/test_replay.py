"""The replay (``python -m sparkscale_listener replay``) on the real event logs under
``tests/data/eventlogs/`` (see ``tests/data/README.md``): the real autoscaler run over a recorded
application's history in the simulator, no Spark."""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
from argparse import Namespace
from dataclasses import replace as changed
from pathlib import Path

import pytest

from benchmarks.bench_eventlog import SOURCE, source_lines, stretch
from sparkscale_listener.__main__ import main
from sparkscale_listener.metrics import BatchRecord
from sparkscale_listener.replay import read_event_log
from sparkscale_listener.replay.cli import run
from sparkscale_listener.replay.history import Action, _query_history, build_history
from sparkscale_listener.replay.records import QueryRecord, RecordedScaling
from sparkscale_listener.replay.report import LAG_COLUMNS, markdown, to_json
from sparkscale_listener.replay.run import MAX_STEP_S, ReplayRun, _sim_query, agreement, compare, replay

LOGS = Path(__file__).resolve().parents[2] / "data" / "eventlogs"
STATIC = LOGS / "spark4-static.lz4"
ROLLING = LOGS / "spark4-sparkscale-rolling"
SPARK35 = LOGS / "spark35-sparkscale.zstd"
KAFKA_FORECAST = LOGS / "spark4-kafka-forecast.zstd"
# The sparkscale runs' own short settings: a 58 s static run is over before the defaults (10 s
# ticks, a 60 s window) would act.
SHORT = {"interval": "2s", "metricsWindow": "8s", "stabilizationInterval": "3s", "scaleDownInterval": "8s"}


@pytest.fixture(scope="module")
def static():
    return read_event_log(STATIC)


@pytest.fixture(scope="module")
def rolling():
    return read_event_log(ROLLING)


@pytest.fixture(scope="module")
def kafka_forecast():
    return read_event_log(KAFKA_FORECAST)


@pytest.fixture(scope="module")
def tiled(tmp_path_factory):
    """Six minutes of the sparkscale run, tiled (its load steps repeat every 104 s)."""
    path = tmp_path_factory.mktemp("tiled") / "app"
    path.write_bytes(b"\n".join(stretch(source_lines(SOURCE), 0.1)) + b"\n")
    return read_event_log(path)


def test_history_of_a_static_run(static) -> None:
    h = build_history(static)
    orders = next(q for q in h.queries if q.label == "orders")
    # The test source: 20 -> 260 -> 20 rows/s, read 400 rows at most per batch (its limit binds
    # while the backlog lasts); the rate query 10 rows/s without a backlog.
    assert orders.trigger_s == 2.0 and orders.read_limit == 400.0 and orders.reports_backlog
    assert max(orders.rates) == pytest.approx(260, rel=0.02)
    assert orders.rates[-1] == pytest.approx(20, rel=0.05)
    # Its rows sleep 10 ms each: the fitted cost per row says so.
    assert orders.cost.per_row_s == pytest.approx(0.010, rel=0.15)
    ticks = next(q for q in h.queries if q.label == "ticks")
    assert not ticks.reports_backlog and ticks.read_limit is None
    assert h.cores == 1 and h.executors_at_start == 2 and h.actions == ()
    assert h.provisioning_s is None
    assert h.executor_seconds == pytest.approx(2 * (h.end - h.start), rel=0.01)


def test_a_kafka_query_is_replayed_with_its_latest_offsets_read_between_batches(static) -> None:
    # As the bridge reads a Kafka source's latest offsets every second, unless kafka.latestOffsets
    # is off; the event log does not hold them, the simulator gives them from the arrivals.
    orders = next(q for q in build_history(static).queries if q.label == "orders")
    assert not orders.reads_kafka  # the project's test source
    kafka = changed(orders, reads_kafka=True)
    assert _sim_query(kafka, 0.0, True).latest_offsets
    assert not _sim_query(kafka, 0.0, False).latest_offsets
    assert not _sim_query(orders, 0.0, True).latest_offsets


def test_static_run_shows_the_executors_sparkscale_would_have_used(static) -> None:
    c = compare(static, [SHORT])
    recorded, short = c.runs
    # The recorded run has no sparkscale settings: the defaults tick every 10 s over a 60 s window,
    # longer than this 58 s application: nothing to decide.
    assert recorded.actions == () and recorded.agreement is None
    up, *after = short.actions
    # 2 -> 3 on the 260 rows/s step; 3 executors of 1 core hold the query's 3 partitions. (Then,
    # the step sized early enough, back to 2 once the load fell to 20 rows/s.)
    assert (up.action, up.from_executors, up.to_executors) == ("scale_up", 2, 3)
    assert [(a.action, a.to_executors) for a in after] in ([], [("scale_down", 2)]), after
    assert short.executor_seconds > c.actual.executor_seconds
    assert short.series.mean_lag_s < c.actual.series.mean_lag_s
    assert any("register 10 s after they are requested" in a for a in c.assumptions)
    text = markdown(c)
    assert "| what it did | 0 |" in text and "scale_up 2 -> 3" in text


def test_sparkscale_run_replayed_with_its_own_settings(rolling) -> None:
    h = build_history(rolling)
    assert [(a.action, a.from_executors, a.to_executors) for a in h.actions] == [
        ("scale_up", 1, 3), ("scale_down", 3, 2)]
    assert h.provisioning_s == pytest.approx(5.0, abs=0.2)  # its scale-up's executors came in 5 s
    # The baseline's kills (3 -> 1) were under way when the queries started: the replay starts on 1.
    assert h.executors_at_start == 1
    run_ = replay(rolling)
    assert run_.settings["spark.sparkscale.maxExecutors"] == "3"
    assert run_.provisioning_s == pytest.approx(h.provisioning_s)
    a = run_.agreement
    assert a is not None and a.recorded == 2 and "recorded actions reproduced" in a.summary
    # The backlog's scale-up: the same direction and target as recorded.
    first = run_.actions[0]
    assert (first.action, first.from_executors, first.to_executors) == ("scale_up", 1, 3)


@pytest.mark.parametrize("log", [
    ROLLING,
    SPARK35,
], ids=["spark4", "spark35"])
def test_recorded_decisions_reproduced(log: Path) -> None:
    a = replay(read_event_log(log)).agreement
    assert a is not None and a.same_counts and a.reproduced == a.recorded


def test_agreement_matches_direction_time_and_target() -> None:
    recorded = [Action(100.0, "scale_up", 1, 3), Action(200.0, "scale_down", 3, 2)]
    replayed = [Action(104.0, "scale_up", 1, 4), Action(150.0, "scale_down", 4, 3),
                Action(260.0, "scale_down", 3, 2)]
    a = agreement(recorded, replayed, tolerance_s=5.0)
    assert (a.recorded, a.reproduced, a.extra, a.same_counts) == (2, 1, 2, False)
    assert a.missed == (recorded[1],)
    assert a.summary.startswith("1 of 2 recorded actions reproduced")
    assert "2 of the 3 replayed actions match no recorded one" in a.summary
    exact = agreement(recorded, [Action(101.0, "scale_up", 1, 3), Action(203.0, "scale_down", 3, 1)], 5.0)
    assert (exact.reproduced, exact.extra, exact.same_counts) == (2, 0, True)


def test_compare_shows_the_scale_down_interval_trade_off(tiled) -> None:
    c = compare(tiled, [{"scaleDownInterval": "8s"}, {"scaleDownInterval": "300s"}])
    _, quick, patient = c.runs
    assert len(patient.actions) < len(quick.actions)
    assert patient.executor_seconds > quick.executor_seconds
    assert all(a.action == "scale_up" for a in patient.actions)
    text = markdown(c)
    assert "| sparkscale: scaleDownInterval=8s |" in text and "| sparkscale: scaleDownInterval=300s |" in text
    doc = to_json(c)
    assert [r["label"] for r in doc["replays"]] == ["recorded settings", "scaleDownInterval=8s",
                                                    "scaleDownInterval=300s"]
    assert doc["replays"][2]["executorSeconds"] > doc["replays"][1]["executorSeconds"]
    assert json.loads(json.dumps(doc)) == doc


def test_the_fidelity_line_gives_counts_that_cannot_contradict_each_other() -> None:
    # Every recorded action replayed, each too late to match: it read "0 of 3 reproduced; 3 extra;
    # same count of scale-ups and scale-downs", extra and the same count at once.
    recorded = [Action(20.0, "scale_up", 1, 4), Action(50.0, "scale_down", 4, 2),
                Action(60.0, "scale_down", 2, 1)]
    late = [Action(a.time + 100.0, a.action, a.from_executors, a.to_executors) for a in recorded]
    assert agreement(recorded, late, tolerance_s=4.0).summary == (
        "0 of 3 recorded actions reproduced (by a replayed action of the same direction within 4.0 s of "
        "it and within 1 executor of its target); 3 of the 3 replayed actions match no recorded one; "
        "scale-ups / scale-downs: 1 / 2 recorded, 1 / 2 replayed")
    assert agreement(recorded, recorded, tolerance_s=4.0).summary == (
        "3 of 3 recorded actions reproduced (by a replayed action of the same direction within 4.0 s of "
        "it and within 1 executor of its target); every replayed action matches a recorded one; "
        "scale-ups / scale-downs: 1 / 2 recorded, 1 / 2 replayed")
    assert agreement([], late[:2], tolerance_s=4.0).summary == (
        "the recorded run took no action in the replayed window, the replay took 2; "
        "scale-ups / scale-downs: 0 / 0 recorded, 1 / 1 replayed")


def test_the_recorded_lag_is_the_age_of_the_oldest_waiting_row() -> None:
    """Rows waiting over the arrival rate of the moment spiked when the load fell (4,442 rows over
    the new 25 rows/s read as 175 s): the lag is how long the oldest row no completed batch had
    read had waited, as the simulator measures a replay's."""
    # 200 rows/s for 20 s, then 25 rows/s; a batch every 10 s reads 1000 rows at most and takes
    # 2 s: the backlog builds to 2000 rows, then drains.
    batches = [BatchRecord(i, 10.0 * (i + 1), 2.0, 1000, backlog=left)
               for i, left in enumerate([1000.0, 2000.0, 1250.0, 500.0])]
    started = QueryRecord("q", "run", "q", 0.0, None, None, (), (), (), 10.0, None)
    q = _query_history([started], batches, [0] * len(batches), 1, [])
    assert q.rates == pytest.approx((200, 200, 25, 25))
    assert q.lag(-1.0) == 0.0  # before the query started
    assert q.lag(5.0) == pytest.approx(5.0)  # nothing read yet: the first row came at the start
    # 1000 rows read by the batch that ended at 12 s; row 1000 arrived at 5 s. (Rows waiting over
    # the rate: 2025 rows / 25 rows/s = 81 s, 21 s into the run.)
    assert q.lag(21.0) == pytest.approx(16.0)
    assert q.lag(35.0) == pytest.approx(20.0)  # 3000 read (at 32 s); row 3000 came at 15 s (was 55 s)
    assert q.lag(45.0) == pytest.approx(25.0)  # 4000 read; row 4000 is the first of the 25 rows/s, at 20 s


def test_every_lag_in_the_report_is_within_the_time_the_application_ran(static) -> None:
    c = compare(static, [SHORT])
    h = c.history
    for series in (c.actual.series, *(r.series for r in c.runs)):
        # The replay's clock starts up to a simulator step before the window.
        assert all(lag <= t - h.start + MAX_STEP_S for t, lag in zip(series.t, series.lag_s, strict=True))
        assert series.max_lag_s > 0.0
    text = markdown(c)
    assert f"| {LAG_COLUMNS[0]} | {LAG_COLUMNS[1]} |" in text
    assert "Age of the oldest waiting row (the lag): how long the oldest row" in text


def test_each_replay_prints_the_settings_it_ran_with(static, rolling) -> None:
    text = markdown(compare(static, [{"maxExecutors": "2"}], base=SHORT))
    assert ("Replayed with the spark.sparkscale.* settings `interval=2s`, `metricsWindow=8s`, "
            "`scaleDownInterval=8s`, `stabilizationInterval=3s` (given); `mode=autoscale` (the replay's "
            "default); every other key at its default (docs/configuration.md).") in text
    assert "`interval=2s`, `maxExecutors=2`, `metricsWindow=8s`" in text
    own = markdown(compare(rolling, [{"scaleDownInterval": "60s"}]))
    assert ("Replayed with the spark.sparkscale.* settings `backlogThreshold=15s`, `catchUpDuration=30s`, "
            "`initialExecutors=1`, `interval=2s`, `maxExecutors=3`, ") in own
    assert ("Replayed with the spark.sparkscale.* settings `scaleDownInterval=60s` (given); "
            "`backlogThreshold=15s`") in own
    assert "`stabilizationInterval=3s` (from the log); `mode=autoscale` (the replay's default)" in own


# -- the command ---------------------------------------------------------------------------------


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    parser_args = _parse(list(argv))
    code = run(parser_args, out, err)
    return code, out.getvalue(), err.getvalue()


def _parse(argv: list[str]) -> Namespace:
    import argparse

    from sparkscale_listener.replay.cli import add_parser

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["replay", *argv])


def test_cli_writes_markdown_json_and_png(tmp_path: Path) -> None:
    code, out, err = _cli(str(STATIC), "--conf", *(f"spark.sparkscale.{k}={v}" for k, v in SHORT.items()),
                          "--compare", "scaleDownInterval=60s", "--out", str(tmp_path))
    assert code == 0, err
    assert out.startswith("# Replay of replay-static") and "scale_up 2 -> 3" in out
    assert (tmp_path / "replay.md").read_text() == out
    doc = json.loads((tmp_path / "replay.json").read_text())
    assert doc["replays"][0]["settings"]["spark.sparkscale.interval"] == "2s"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "no PNG" in err and not (tmp_path / "replay.png").exists()
    else:
        assert (tmp_path / "replay.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_conf_takes_the_short_key_as_compare_does() -> None:
    short = _cli(str(LOGS / "spark4-tiny"), "--conf", "scaleDownInterval=60s", "maxExecutors=3")
    full = _cli(str(LOGS / "spark4-tiny"), "--conf", "spark.sparkscale.scaleDownInterval=60s",
                "spark.sparkscale.maxExecutors=3")
    assert short[0] == 0, short[2]
    assert short == full
    assert "`maxExecutors=3`, `scaleDownInterval=60s` (given)" in short[1]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--conf", "spark.sparkscale.scaleDownIntervall=60s"],
     "spark.sparkscale.scaleDownIntervall='60s' is not a known key; did you mean "
     "spark.sparkscale.scaleDownInterval"),
    (["--conf", "spark.sparkscale.scaleDownInterval=soon"], "spark.sparkscale.scaleDownInterval"),
    (["--compare", "maxExecutors=0"], "spark.sparkscale.maxExecutors"),
    (["--conf", "scaleDownInterval"], "--conf 'scaleDownInterval': expected KEY=VALUE"),
    (["--conf", "spark.sparkScale.maxExecutors=4"], "did you mean spark.sparkscale.maxExecutors"),
    (["--conf", "spark.executor.cores=4"], "only spark.sparkscale.* settings are replayed"),
])
def test_cli_bad_settings_exit_2_with_the_config_message(argv: list[str], expected: str) -> None:
    code, out, err = _cli(str(STATIC), *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and expected in err and "Traceback" not in err


def test_cli_foreign_malformed_and_truncated_logs_exit_2(tmp_path: Path) -> None:
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello\n")
    malformed = tmp_path / "app-1"
    lines = (LOGS / "spark4-tiny").read_bytes().splitlines()
    malformed.write_bytes(b"\n".join([*lines[:5], b'{"Event":"SparkListenerJobStart", oops', *lines[5:]]))
    truncated = tmp_path / "app-2"
    truncated.write_bytes(b"")
    for path, expected in [(foreign, f"{foreign}: line 1"), (malformed, f"{malformed}: line 6"),
                           (truncated, str(truncated)), (tmp_path / "missing", "missing")]:
        code, out, err = _cli(str(path))
        assert code == 2 and out == "", (path, err)
        assert err.startswith("error: ") and expected in err and "Traceback" not in err, err


def test_main_dispatches_the_replay_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(LOGS / "spark4-tiny")]) == 0
    assert "# Replay of" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["replay"])
    assert exit_.value.code == 2


def test_progress_bar_only_on_a_terminal_after_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    from sparkscale_listener.replay import cli

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    clock = iter([0.0, 0.5, 3.0, 3.5, 4.0])
    monkeypatch.setattr(cli.time, "monotonic", lambda: next(clock))
    terminal, pipe = Terminal(), io.StringIO()
    bar = cli.ProgressBar(terminal, "app")
    bar(10, 100)  # 0.5 s in: nothing yet
    assert terminal.getvalue() == ""
    bar(50, 100)
    bar(100, 100)
    assert "50%" in terminal.getvalue() and terminal.getvalue().endswith("100% (0.0 of 0.0 MB)\n")
    silent = cli.ProgressBar(pipe, "app")
    silent(100, 100)
    assert pipe.getvalue() == ""


def test_json_has_no_infinities(static) -> None:
    doc = to_json(compare(static, [SHORT]))
    numbers = [doc["actual"]["maxLagS"], *(r["maxLagS"] for r in doc["replays"])]
    assert all(x is None or math.isfinite(x) for x in numbers)


def test_environment_is_not_touched() -> None:
    # The command writes only where --out says: no stray files in the working directory.
    before = set(os.listdir("."))
    with tempfile.TemporaryDirectory():
        _cli(str(STATIC))
    assert set(os.listdir(".")) == before


def test_actions_after_the_queries_last_batch_are_left_out_and_said(rolling) -> None:
    """An action the log records after every query's last batch (a batch job's scale-up once the
    queries stopped) is outside the replayed window: neither compared nor counted as done."""
    h = build_history(rolling)
    late = RecordedScaling(h.end + 1.0, "scale_up", 2, 3, "other jobs' tasks need 3 executors", True,
                           "autoscale", {})
    later = build_history(changed(rolling, scalings=(*rolling.scalings, late)))
    assert later.actions == h.actions
    assert any("outside the replayed window: scale_up 2 -> 3" in x for x in later.assumptions)
    c = compare(changed(rolling, scalings=(*rolling.scalings, late)))
    a = c.runs[0].agreement
    assert a is not None and a.recorded == len(h.actions) and a.outside == 1
    assert a.summary.endswith("; 1 recorded action after the queries' last batch, outside the replayed "
                              "window, not compared")
    # What it did lists it, so that it matches the actions the application logged.
    assert (f"- t={late.time - h.start:.0f} s: scale_up 2 -> 3 (after the queries' last batch: outside the "
            "replayed window): other jobs' tasks need 3 executors") in markdown(c)


def test_compare_replays_the_forecast_off_and_on_over_a_recurring_log(tiled) -> None:
    """``replay --compare forecast.mode=off forecast.mode=on``: the tiled log's steps recur; with the
    forecast on, its period is detected and a scale-up comes as a pre-scale before a recurring step;
    off, none does."""
    c = compare(tiled, [{"forecast.mode": "off"}, {"forecast.mode": "on"}])
    _, off, on = c.runs
    assert not [a for a in off.actions if a.reason.startswith("pre-scale")]
    pre_scales = [a for a in on.actions if a.reason.startswith("pre-scale")]
    assert pre_scales and all(a.action == "scale_up" for a in pre_scales)
    assert "forecast error" in pre_scales[0].reason
    text = markdown(c)
    assert "| sparkscale: forecast.mode=off |" in text and "| sparkscale: forecast.mode=on |" in text



def test_compare_replays_the_forecast_off_and_on_over_a_recorded_kafka_run_of_three_periods(
        kafka_forecast) -> None:
    """The real run of ``bench_kafka_step.py --shape recurring`` (sparkscale with the forecast on, see
    ``tests/data/README.md``): three periods of 160 s, each a ramp from 50 to 500 records/s from 50 s
    in. The run itself pre-scaled 1 -> 4 before the second and the third ramps, the load still at 50.
    ``replay --compare forecast.mode=off forecast.mode=on`` on it: off, no pre-scale, and the second
    ramp is followed step by step (1 -> 2 -> 3 -> 4); on, the period is learnt in the first, and the
    second and third ramps are met by a pre-scale to maxExecutors in one action, as in the run,
    earlier than off gets there."""
    h = build_history(kafka_forecast)
    (q,) = h.queries
    assert q.reads_kafka and q.trigger_s == 2.0
    assert max(q.rates) == pytest.approx(500, rel=0.1)
    recorded = [a for a in h.actions if a.reason.startswith("pre-scale")]
    assert [(a.from_executors, a.to_executors) for a in recorded] == [(1, 4), (1, 4)]
    assert all(q.load(a.time) < 100 for a in recorded)  # before the ramps, on the real cluster
    c = compare(kafka_forecast, [{"forecast.mode": "off"}, {"forecast.mode": "on"}])
    _, off, on = c.runs
    assert on.settings["spark.sparkscale.forecast.period"] == "160s"
    assert not [a for a in off.actions if a.reason.startswith("pre-scale")]
    pre_scales = [a for a in on.actions if a.reason.startswith("pre-scale")]
    assert pre_scales and all(a.action == "scale_up" and a.time - h.start > 160 for a in pre_scales)
    assert "forecast error" in pre_scales[0].reason
    # As the run did: 1 -> 4 before the second and the third ramps, the load still at 50. (Until the
    # simulated cluster removed a busy executor as its tasks ended, as the bridge does, the replay
    # waited 36-46 s for each scale-down's executor to leave and missed the third.)
    assert [(a.from_executors, a.to_executors) for a in pre_scales] == [(1, 4), (1, 4)]
    assert all(q.load(a.time) < 100 for a in pre_scales)

    def second_period_ups(run: ReplayRun) -> list[Action]:
        return [a for a in run.actions if a.action == "scale_up" and 160 <= a.time - h.start < 320]

    def first_at_max(run: ReplayRun) -> float:
        return min(a.time for a in second_period_ups(run) if a.to_executors == 4)

    assert len(second_period_ups(on)) == 1 < len(second_period_ups(off))
    assert first_at_max(on) < first_at_max(off)
    text = markdown(c)
    assert "| sparkscale: forecast.mode=off |" in text and "| sparkscale: forecast.mode=on |" in text
