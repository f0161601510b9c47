"""Reading Spark event logs into records (``sparkscale_listener.replay``), on real logs recorded here
(``tests/data/eventlogs/``, see ``tests/data/README.md``; ``tests/record_event_logs.py`` records them
again) and on broken ones made from them. No Spark needed.
"""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
from pathlib import Path

import cramjam
import pytest
import zstandard

from sparkscale_listener.replay import EventLogError, QueryRecord, RecordedApplication, read_event_log
from sparkscale_listener.replay.codecs import decompressed_chunks, find_log_files, lzf_decompress

DATA = Path(__file__).resolve().parents[2] / "data" / "eventlogs"
TINY = DATA / "spark4-tiny"  # plain JSON lines
TINY_LZF = DATA / "spark4-tiny-lzf.lzf"
ROLLING = DATA / "spark4-sparkscale-rolling"  # a rolling folder, zstd
STATIC = DATA / "spark4-static.lz4"
SPARK35 = DATA / "spark35-sparkscale.zstd"
TINY_SNAPPY = DATA / "spark4-tiny-snappy.snappy"
COST_MS = 10.0  # the test source's sleep per row in the recordings with load steps


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def event_name(line: bytes) -> str:
    return json.loads(line)["Event"]


# ---------------------------------------------------------------------------------------------
# Spark's framings, written here the way Spark's codecs write them (to check the reader on the
# same content in every codec, and to cut and corrupt them)
# ---------------------------------------------------------------------------------------------


def spark_zstd(data: bytes, lines_per_frame: int = 7) -> bytes:
    """zstd-jni's continuous stream: one frame per flush (here every few lines)."""
    lines = data.splitlines(keepends=True)
    compressor = zstandard.ZstdCompressor()
    return b"".join(compressor.compress(b"".join(lines[i:i + lines_per_frame]))
                    for i in range(0, len(lines), lines_per_frame))


def spark_lz4(data: bytes, block: int = 32 * 1024) -> bytes:
    """lz4-java's LZ4BlockOutputStream (checksums left 0: the reader does not check them)."""
    level = 5  # ceil(log2(32 KiB)) - 10
    out = []
    for i in range(0, len(data), block):
        chunk = data[i:i + block]
        packed = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        out.append(b"LZ4Block" + bytes([0x20 | level]) + len(packed).to_bytes(4, "little")
                   + len(chunk).to_bytes(4, "little") + bytes(4) + packed)
    out.append(b"LZ4Block" + bytes([0x10 | level]) + bytes(12))  # the end mark
    return b"".join(out)


def spark_snappy(data: bytes, block: int = 32 * 1024) -> bytes:
    """snappy-java's SnappyOutputStream: its header, then length-prefixed raw snappy blocks."""
    out = [b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big")]
    for i in range(0, len(data), block):
        packed = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out.append(len(packed).to_bytes(4, "big") + packed)
    return b"".join(out)


def spark_lzf_plain_chunks(data: bytes) -> bytes:
    """compress-lzf's chunk framing with uncompressed chunks (its compressed ones: the real log)."""
    return b"".join(b"ZV\x00" + len(data[i:i + 0xFFFF]).to_bytes(2, "big") + data[i:i + 0xFFFF]
                    for i in range(0, len(data), 0xFFFF))


ENCODERS = {"zstd": spark_zstd, "lz4": spark_lz4, "snappy": spark_snappy, "lzf": spark_lzf_plain_chunks}


def summary(app: RecordedApplication) -> tuple:
    """What must not depend on the file's framing."""
    return (app.app_id, app.spark_version, app.start_time, app.end_time, dict(app.conf), app.executors,
            app.queries, app.jobs, app.scalings, app.ticks, app.assumptions, app.truncated)


# ---------------------------------------------------------------------------------------------
# A small real log, read exactly
# ---------------------------------------------------------------------------------------------


def test_tiny_plain_log_reads_every_fact_spark_wrote() -> None:
    app = read_event_log(TINY)
    assert app.spark_version == "4.3.0" and app.name == "replay-tiny-plain"
    assert app.app_id and app.app_id.startswith("app-")
    assert app.start_time is not None and app.end_time is not None and app.start_time < app.end_time
    assert app.executor_cores == 1 and app.task_cpus == 1
    assert app.conf["spark.master"] == "local-cluster[1,1,1024]"
    assert not app.ran_sparkscale and not app.scalings and not app.ticks and not app.sparkscale_conf
    assert not app.truncated
    [executor] = app.executors
    assert executor.cores == 1 and executor.host == "127.0.0.1"
    assert app.start_time < executor.added_time < app.end_time and executor.removed_time is None
    [query] = app.queries
    assert query.name == "tiny" and query.exception is None
    assert query.start_time < query.batches[0].timestamp and query.end_time <= app.end_time
    assert [b.batch_id for b in query.batches] == list(range(6))
    for batch in query.batches:
        [source] = batch.sources
        # The test source's offsets count rows: each batch reads exactly end - start of them.
        start = source.start_offset["offset"] if source.start_offset else 0
        assert batch.num_input_rows == source.num_input_rows == source.end_offset["offset"] - start
        assert batch.backlog_rows == source.latest_offset["offset"] - source.end_offset["offset"]
        assert {"triggerExecution", "addBatch", "latestOffset", "queryPlanning", "walCommit",
                "commitOffsets", "getBatch"} <= set(batch.duration_ms)
        # Its tasks ran inside the batch: one per partition, at most 2 (the source's partitions).
        tasks = batch.tasks
        assert tasks is not None and tasks.tasks == min(2, batch.num_input_rows) and tasks.failed_tasks == 0
        assert tasks.executors == ("0",)
        assert batch.timestamp <= tasks.first_launch <= tasks.last_finish <= batch.end_time + 0.001
        assert 0 < tasks.run_ms <= tasks.task_ms
    assert sum(b.num_input_rows for b in query.batches) == query.batches[-1].sources[0].end_offset["offset"]
    assert app.jobs == ()  # every job belongs to the query


def test_lzf_log_from_spark_reads_like_a_plain_one() -> None:
    app = read_event_log(TINY_LZF)
    assert app.name == "replay-tiny-lzf" and not app.truncated
    [query] = app.queries
    assert [b.batch_id for b in query.batches] == list(range(6))
    assert all(b.tasks and b.tasks.tasks == min(2, b.num_input_rows) for b in query.batches)


@pytest.mark.parametrize("codec", sorted(ENCODERS))
def test_every_codec_gives_the_same_record(codec: str, tmp_path: Path) -> None:
    plain = read_event_log(TINY)
    encoded = tmp_path / f"app-1.{codec}"
    encoded.write_bytes(ENCODERS[codec](TINY.read_bytes()))
    assert summary(read_event_log(encoded)) == summary(plain)


def test_lzf_decoder_on_back_references() -> None:
    # literal "abc", then a back reference of length 9 at distance 3 (overlapping: "abcabcabc")
    assert lzf_decompress(b"\x02abc" + bytes([(7 << 5) | 0, 9 - 2 - 7, 2]), 12) == b"abc" + b"abc" * 3
    with pytest.raises(ValueError, match="before the block's start"):
        lzf_decompress(bytes([(1 << 5), 5]), 3)


def test_progress_reports_every_byte(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    read_event_log(TINY_LZF, progress=lambda done, total: calls.append((done, total)))
    size = TINY_LZF.stat().st_size
    assert calls and calls[-1] == (size, size)
    assert all(a[0] <= b[0] for a, b in itertools.pairwise(calls))


def test_rolling_folder_is_read_in_index_order(tmp_path: Path) -> None:
    """A rolling log in several files (index 10 after 2), each its own zstd stream."""
    lines = TINY.read_bytes().splitlines(keepends=True)
    folder = tmp_path / "eventlog_v2_app-1"
    folder.mkdir()
    third = len(lines) // 3
    thirds = [lines[:third], lines[third:2 * third], lines[2 * third:]]
    for index, part in zip((1, 2, 10), thirds, strict=True):
        (folder / f"events_{index}_app-1.zstd").write_bytes(spark_zstd(b"".join(part)))
    (folder / "appstatus_app-1").write_bytes(b"")
    (folder / ".events_1_app-1.zstd.crc").write_bytes(b"crc")
    assert summary(read_event_log(folder)) == summary(read_event_log(TINY))


# ---------------------------------------------------------------------------------------------
# What the log lacks: assumptions
# ---------------------------------------------------------------------------------------------


def write_without(tmp_path: Path, drop: str) -> Path:
    path = tmp_path / "app-1"
    path.write_bytes(b"".join(line for line in lines_of(TINY) if event_name(line) != drop))
    return path


def test_a_log_without_task_events_says_so(tmp_path: Path) -> None:
    app = read_event_log(write_without(tmp_path, "SparkListenerTaskEnd"))
    assert all(b.tasks is None for b in app.queries[0].batches)
    assert any("no task events for any of its 6 batches" in a for a in app.assumptions), app.assumptions


def test_an_executor_never_announced_takes_the_configured_size(tmp_path: Path) -> None:
    app = read_event_log(write_without(tmp_path, "SparkListenerExecutorAdded"))
    [executor] = app.executors
    assert executor.executor_id == "0" and executor.cores == 1 and executor.added_time is None
    assert any("executor 0 ran tasks or was removed, but its addition is not in the log" in a
               and "spark.executor.cores=1" in a for a in app.assumptions), app.assumptions


def test_a_log_without_its_environment_says_the_configuration_is_unknown(tmp_path: Path) -> None:
    app = read_event_log(write_without(tmp_path, "SparkListenerEnvironmentUpdate"))
    assert app.conf == {} and app.executor_cores is None
    assert any("configuration is unknown" in a for a in app.assumptions)


def test_a_log_that_ends_mid_batch(tmp_path: Path) -> None:
    lines = lines_of(TINY)
    last_job = max(i for i, line in enumerate(lines) if event_name(line) == "SparkListenerJobStart")
    path = tmp_path / "app-1.inprogress"
    path.write_bytes(b"".join(lines[: last_job + 3]))
    app = read_event_log(path)
    query = app.queries[0]
    assert [b.batch_id for b in query.batches] == list(range(5)) and query.end_time is None
    assert app.end_time is None and not app.truncated
    assert any("the log ends during batch 5" in a for a in app.assumptions), app.assumptions
    assert any("no SparkListenerApplicationEnd" in a and "in progress" in a for a in app.assumptions)


# ---------------------------------------------------------------------------------------------
# Broken and foreign files: a clear error naming the file and where, or a tolerated cut end
# ---------------------------------------------------------------------------------------------


def test_a_half_written_last_line_is_tolerated(tmp_path: Path) -> None:
    data = TINY.read_bytes()
    path = tmp_path / "app-1.inprogress"
    path.write_bytes(data[: len(data) - 40])  # inside the last line (ApplicationEnd)
    app = read_event_log(path)
    assert app.truncated and app.end_time is None
    count = data.count(b"\n")
    assert any(f"half-written line ({count})" in a for a in app.assumptions), app.assumptions
    assert len(app.queries[0].batches) == 6


@pytest.mark.parametrize("codec", sorted(ENCODERS))
def test_a_compressed_log_cut_anywhere_reads_up_to_the_cut(codec: str, tmp_path: Path) -> None:
    whole = ENCODERS[codec](TINY.read_bytes())
    path = tmp_path / f"app-1.{codec}.inprogress"
    batches = []
    for fraction in (0.05, 0.3, 0.61, 0.97):
        path.write_bytes(whole[: int(len(whole) * fraction)])
        try:
            app = read_event_log(path)
        except EventLogError as e:  # only when not even the first block is whole
            assert "nothing readable yet: it ends inside its first compressed block" in str(e)
            batches.append(0)
            continue
        assert app.end_time is None and any("no SparkListenerApplicationEnd" in a for a in app.assumptions)
        batches.append(len(app.queries[0].batches) if app.queries else 0)
    assert batches == sorted(batches) and batches[-1] >= 3, batches


def test_a_corrupt_line_in_the_middle_names_file_and_line(tmp_path: Path) -> None:
    lines = lines_of(TINY)
    lines[9] = b'{"Event":"SparkListenerTaskEnd","Stage ID":3,,}\n'
    path = tmp_path / "app-1"
    path.write_bytes(b"".join(lines))
    with pytest.raises(EventLogError) as err:
        read_event_log(path)
    assert err.value.line == 10 and err.value.path == str(path)
    assert str(err.value).startswith(f"{path}: line 10: not valid JSON")


def test_an_event_without_its_fields_names_the_event_and_line(tmp_path: Path) -> None:
    lines = lines_of(TINY)
    index = next(i for i, line in enumerate(lines) if event_name(line) == "SparkListenerTaskEnd")
    lines[index] = b'{"Event":"SparkListenerTaskEnd","Stage ID":0}\n'
    path = tmp_path / "app-1"
    path.write_bytes(b"".join(lines))
    with pytest.raises(EventLogError, match=rf"line {index + 1}: a SparkListenerTaskEnd event without the "
                                            r"fields Spark writes \(KeyError: 'Task Info'\)"):
        read_event_log(path)


@pytest.mark.parametrize(("content", "expected"), [
    (b"hello\nworld\n", r"line 1: not a Spark event log: not a JSON event, starts b'hello'"),
    (b'{"name": "x"}\n', r'line 1: not a Spark event log: a JSON line without an "Event" field'),
    (b"", r"holds no Spark listener event"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", r"line 1: not a Spark event log"),
    (b"PK\x03\x04zipzip", r"byte 0: is a zip archive"),
])
def test_foreign_files_are_refused(content: bytes, expected: str, tmp_path: Path) -> None:
    path = tmp_path / "something.log"
    path.write_bytes(content)
    with pytest.raises(EventLogError, match=expected) as err:
        read_event_log(path)
    assert str(err.value).startswith(str(path))


def test_a_gzip_file_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "app-1.gz"
    path.write_bytes(gzip.compress(TINY.read_bytes()))
    with pytest.raises(EventLogError, match=r"byte 0: is gzip-compressed, which Spark does not write"):
        read_event_log(path)


def test_a_compressed_log_without_its_extension_is_named(tmp_path: Path) -> None:
    path = tmp_path / "app-1"
    path.write_bytes(spark_zstd(TINY.read_bytes()))
    with pytest.raises(EventLogError, match=r"zstd-compressed, but its name does not end in .zstd"):
        read_event_log(path)


@pytest.mark.parametrize("codec", sorted(ENCODERS))
def test_a_plain_log_named_as_compressed_is_refused(codec: str, tmp_path: Path) -> None:
    path = tmp_path / f"app-1.{codec}"
    path.write_bytes(TINY.read_bytes())
    expected = r"byte 0: (corrupt zstd|not an lz4 block|not a snappy-java|not an lzf)"
    with pytest.raises(EventLogError, match=expected):
        read_event_log(path)


@pytest.mark.parametrize("codec", ["zstd", "lz4", "snappy"])
def test_corrupt_compressed_data_names_the_byte(codec: str, tmp_path: Path) -> None:
    whole = bytearray(ENCODERS[codec](TINY.read_bytes()))
    middle = len(whole) // 2
    whole[middle:middle + 64] = bytes(64)
    path = tmp_path / f"app-1.{codec}"
    path.write_bytes(bytes(whole))
    with pytest.raises(EventLogError, match=r": byte \d+: (corrupt|not an lz4 block)") as err:
        read_event_log(path)
    assert err.value.offset is not None and err.value.offset <= middle


def test_corrupt_lzf_chunk_from_spark(tmp_path: Path) -> None:
    whole = bytearray(TINY_LZF.read_bytes())
    whole[len(whole) // 2: len(whole) // 2 + 32] = b"\xff" * 32
    path = tmp_path / "app-1.lzf"
    path.write_bytes(bytes(whole))
    with pytest.raises(EventLogError, match=r"byte \d+: (corrupt lzf chunk|not an lzf chunk)"):
        read_event_log(path)


def test_missing_paths_and_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(EventLogError, match="no such file or folder"):
        read_event_log(tmp_path / "nothing")
    with pytest.raises(EventLogError, match=r"a folder without event log files"):
        read_event_log(tmp_path)


def test_a_missing_codec_library_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    real = importlib.import_module

    def without_zstandard(name: str, *args: object) -> object:
        if name == "zstandard":
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", without_zstandard)
    path = tmp_path / "app-1.zstd"
    path.write_bytes(spark_zstd(TINY.read_bytes()))
    expected = r"compressed with zstd; reading it needs the 'zstandard' package: pip install " \
               r"'sparkscale-listener\[replay\]'"
    with pytest.raises(EventLogError, match=expected):
        read_event_log(path)


# ---------------------------------------------------------------------------------------------
# The recorded applications: what must be true of each
# ---------------------------------------------------------------------------------------------


def task_end_count(path: Path) -> int:
    """TaskEnd events in the log, counted on the raw text (not through the reader)."""
    logs = find_log_files(path).files
    data = b"".join(chunk for log in logs for chunk in decompressed_chunks(log, lambda n: None))
    return sum(1 for line in data.splitlines() if line.startswith(b'{"Event":"SparkListenerTaskEnd"'))


def attributed_tasks(app: RecordedApplication) -> int:
    per_batch = sum(b.tasks.tasks for q in app.queries for b in q.batches if b.tasks)
    per_query = sum(q.other_task_time.tasks for q in app.queries if q.other_task_time)
    return per_batch + per_query + sum(j.tasks.tasks for j in app.jobs if j.tasks)


def check_sleeping_batches(query: QueryRecord, partitions: int) -> None:
    """The test source sleeps COST_MS per row: a batch's run time is at least that, and its slot
    time (launch to finish) is that plus a bounded overhead (a new executor's Python workers
    start inside its first tasks), spread over its partitions."""
    loaded = [b for b in query.batches if b.num_input_rows >= 100]
    assert loaded
    for batch in loaded:
        work = batch.num_input_rows * COST_MS
        tasks = batch.tasks
        assert tasks is not None and tasks.tasks == partitions, batch
        assert work <= tasks.run_ms <= tasks.task_ms <= 2 * work + 5000, (batch.batch_id, work, tasks)
        assert batch.timestamp <= tasks.first_launch <= tasks.last_finish <= batch.end_time + 0.001


def test_static_run_without_sparkscale(tmp_path: Path) -> None:
    app = read_event_log(STATIC)
    assert app.spark_version == "4.3.0" and app.name == "replay-static" and not app.truncated
    assert not app.ran_sparkscale and not app.scalings and not app.ticks and not app.autoscaler_events
    # Two static executors, alive from before the queries to the end.
    assert [(e.cores, e.removed_time) for e in app.executors] == [(1, None), (1, None)]
    orders, ticks = app.query("orders"), app.query("ticks")
    assert app.executors_at(orders.start_time) == 2 and app.executors_at(app.start_time) == 0
    assert orders.trigger_interval_s == 2.0 and ticks.trigger_interval_s == 5.0
    assert orders.end_time is not None and orders.exception is None
    check_sleeping_batches(orders, partitions=3)
    # 260 rows/s is more than 2 executors read: the backlog grows, then drains at 20 rows/s.
    backlogs = [b.backlog_rows for b in orders.batches]
    peak = backlogs.index(max(backlogs))
    assert backlogs[0] == 0 and max(backlogs) > 1000 and backlogs[-1] < max(backlogs)
    assert all(a <= b for a, b in itertools.pairwise(backlogs[:peak + 1]))
    # The rate source: one partition, no backlog (a generator), which the assumptions say.
    assert all(b.tasks and b.tasks.tasks == 1 and b.backlog_rows is None for b in ticks.batches)
    assert all(b.num_input_rows == 50 for b in ticks.batches[2:])
    assert any("query 'ticks': source RateStreamV2" in a and "no backlog" in a for a in app.assumptions)
    assert any("query 'orders': it was stopped during batch 20" in a for a in app.assumptions)
    # The batch job beside the queries, and every task counted exactly once somewhere.
    assert [j.description for j in app.jobs] == ["nightly report", "nightly report"]
    report = app.jobs[0]
    assert report.succeeded and report.tasks is not None and report.tasks.tasks == 4
    assert orders.start_time < report.submission_time < report.completion_time < orders.end_time
    whole = sum(j.tasks.task_ms for j in app.jobs if j.tasks)
    assert app.job_task_ms(app.start_time, app.end_time) == pytest.approx(whole)
    assert app.job_task_ms(app.start_time, report.tasks.first_launch) == 0.0
    assert attributed_tasks(app) == task_end_count(STATIC)


def check_executors(app: RecordedApplication) -> None:
    """Executors' times are consistent, and every batch's tasks ran on executors alive then."""
    executors = {e.executor_id: e for e in app.executors}
    for e in app.executors:
        assert e.cores == 1 and e.added_time is not None and app.start_time < e.added_time
        if e.removed_time is not None:
            assert e.added_time < e.removed_time <= app.end_time and e.removed_reason
    for query in app.queries:
        for batch in query.batches:
            for executor_id in batch.tasks.executors:
                e = executors[executor_id]
                assert e.added_time <= batch.tasks.last_finish
                assert e.removed_time is None or e.removed_time >= batch.tasks.first_launch


def test_sparkscale_run_rolling_zstd_records_its_scalings_and_executors() -> None:
    app = read_event_log(ROLLING)
    assert app.spark_version == "4.3.0" and app.name == "replay-sparkscale" and not app.truncated
    assert app.ran_sparkscale and app.sparkscale_conf["spark.sparkscale.maxExecutors"] == "3"
    assert app.sparkscale_conf["spark.sparkscale.scaleDownInterval"] == "8s"
    assert app.conf["spark.eventLog.rolling.enabled"] == "true" and not app.dynamic_allocation_conf
    check_executors(app)
    # What sparkscale decided: up 1 -> 3 as the arrivals rose, then down a step, both applied.
    moves = [(s.action, s.from_executors, s.to_executors, s.applied, s.mode) for s in app.scalings]
    assert moves == [("scale_up", 1, 3, True, "autoscale"), ("scale_down", 3, 2, True, "autoscale")]
    up, down = app.scalings
    assert "rising" in up.reason and "lower recommendations" in down.reason
    # ...and what the cluster did: the executors it asked for came after the scale-up, and one
    # left after the scale-down (local-cluster starts 3; the autoscaler's baseline keeps 1).
    assert app.executors_at(up.time) == 1 and app.executors_at(down.time) == 3
    added = sorted(e.added_time for e in app.executors if e.added_time > up.time)
    assert len(added) == 2 and added[-1] < down.time
    removed = sorted(e.removed_time for e in app.executors if e.removed_time and e.removed_time > up.time)
    assert len(removed) == 1 and down.time < removed[0] <= app.end_time
    assert app.executors_at(removed[0]) == 2 and app.executors_at(app.end_time) == 2
    # Its other events and tick summaries.
    assert app.autoscaler_events[0].kind == "notice" and "baseline" in app.autoscaler_events[0].reason
    assert {"interval_s", "min_executors", "max_executors"} <= set(app.ticks[0].config)
    assert all(a.time <= b.time for a, b in itertools.pairwise(app.ticks))
    assert any(t.point.get("live") == 3 for t in app.ticks)
    # The queries: the load step shows as a backlog that the scale-up worked off.
    orders, ticks = app.query("orders"), app.query("ticks")
    assert orders.trigger_interval_s == 2.0 and ticks.trigger_interval_s == 10.0
    check_sleeping_batches(orders, partitions=3)
    backlogs = [b.backlog_rows for b in orders.batches]
    assert max(backlogs) > 1000 and backlogs[-1] == 0
    assert orders.batches[backlogs.index(max(backlogs))].timestamp < down.time
    assert all(b.backlog_rows is None and b.tasks.tasks == 1 for b in ticks.batches)
    assert [j.description for j in app.jobs] == ["nightly report", "nightly report"]
    assert attributed_tasks(app) == task_end_count(ROLLING)


def test_spark35_run_with_sparkscale() -> None:
    app = read_event_log(SPARK35)
    assert app.spark_version == "3.5.7" and app.name == "replay-spark35" and not app.truncated
    assert app.ran_sparkscale
    check_executors(app)
    assert [(s.action, s.from_executors, s.to_executors, s.applied) for s in app.scalings] == [
        ("scale_up", 1, 2, True), ("scale_down", 2, 1, True)]
    up = app.scalings[0]
    # (The first batches ran on the cluster's 3 executors, before the baseline of 1.)
    assert app.executors_at(up.time) == 1 and max(app.executors_at(b.timestamp) for b in
                                                  app.query("enrich").batches if b.timestamp > up.time) == 2
    [query] = app.queries
    assert query.name == "enrich" and query.trigger_interval_s == 1.0
    # The file source: its offsets count files, not rows, and it reports no backlog (no latest
    # offset), which the assumptions say.
    assert all(b.backlog_rows is None and set(b.sources[0].end_offset) == {"logOffset"}
               for b in query.batches)
    assert any("FileStreamSource" in a and "no backlog" in a for a in app.assumptions)
    # 20 rows/s, 150 from a few seconds in (batches of 300-420 rows while one executor lags), 20.
    rows = [b.num_input_rows for b in query.batches]
    assert max(rows) >= 300 and rows[-5:] == [20] * 5
    assert app.ticks and app.jobs == ()
    assert attributed_tasks(app) == task_end_count(SPARK35)


def test_snappy_log_from_spark() -> None:
    app = read_event_log(TINY_SNAPPY)
    assert app.name == "replay-tiny-snappy" and not app.truncated
    [query] = app.queries
    assert [b.batch_id for b in query.batches] == list(range(6))
    assert all(b.tasks and b.tasks.tasks == min(2, b.num_input_rows) for b in query.batches)


def test_a_rolling_log_still_being_written(tmp_path: Path) -> None:
    """Spark's own in-progress state: ``appstatus_<appId>.inprogress``, the last file cut mid-frame."""
    folder = tmp_path / ROLLING.name
    shutil.copytree(ROLLING, folder)
    [status] = folder.glob("appstatus_*")
    status.rename(status.with_name(status.name + ".inprogress"))
    [events] = folder.glob("events_*")
    data = events.read_bytes()
    events.write_bytes(data[: len(data) * 2 // 3])
    app = read_event_log(folder)
    assert app.truncated and app.end_time is None
    assert any("ends inside a compressed block" in a for a in app.assumptions), app.assumptions
    assert any("was still running (the log is in progress)" in a for a in app.assumptions)
    whole = read_event_log(ROLLING)
    assert 0 < len(app.query("orders").batches) < len(whole.query("orders").batches)
    assert app.scalings == whole.scalings[: len(app.scalings)]


def test_a_no_data_trigger_of_older_spark_is_an_idle_report(tmp_path: Path) -> None:
    """Before 3.5 a trigger that found no data posted a progress without ``addBatch``: not a batch."""
    lines = lines_of(TINY)
    index = max(i for i, line in enumerate(lines) if b"QueryProgressEvent" in line)
    event = json.loads(lines[index])
    progress = event["progress"]
    progress["batchId"] += 1
    progress["durationMs"] = {"latestOffset": 1, "triggerExecution": 1}
    for source in progress["sources"]:
        source["startOffset"] = source["endOffset"] = source["latestOffset"]
        source["numInputRows"] = 0
    lines.insert(index + 1, json.dumps(event).encode() + b"\n")
    path = tmp_path / "app-1"
    path.write_bytes(b"".join(lines))
    query = read_event_log(path).queries[0]
    assert len(query.batches) == 6 and [r.batch_id for r in query.idle_reports] == [6]
    assert query.idle_reports[0].backlog_rows == 0 and query.idle_reports[0].tasks is None
