"""Settings from a real ``spark-defaults.conf`` (in a ``SPARK_CONF_DIR`` of the test's own) reach the
autoscaler's checks before the session starts, and a near-miss prefix there is reported once when it
starts. Each case is a fresh driver process: pyspark reads the conf directory when it launches the
driver JVM, once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]


def run_driver(tmp_path: Path, defaults: str, script: str) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(textwrap.dedent(defaults), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT")}
    env.update(SPARK_CONF_DIR=str(conf), SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_dynamic_allocation_from_spark_defaults_is_refused_before_a_spark_context_exists(
        tmp_path: Path) -> None:
    done = run_driver(tmp_path, """
        spark.dynamicAllocation.enabled   true
    """, """
        from pyspark import SparkContext
        from pyspark.sql import SparkSession
        from sparkscale_listener import ConfigError, autoscale

        try:
            autoscale(SparkSession.builder.master("local[1]"))
            print("STARTED")
        except ConfigError as err:
            print("REFUSED", err)
        print("CONTEXT", SparkContext._active_spark_context, SparkContext._gateway)
        # The same file is what Spark itself reads: a session started without us has the setting.
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        print("SPARK_READ", spark.sparkContext.getConf().get("spark.dynamicAllocation.enabled"))
        spark.stop()
    """)
    lines = done.stdout.splitlines()
    refused = [line for line in lines if line.startswith("REFUSED spark.dynamicAllocation.enabled=true: ")]
    assert refused, done.stdout
    assert "STARTED" not in lines
    assert "CONTEXT None None" in lines  # no SparkContext, not even a driver JVM
    assert "SPARK_READ true" in lines


def test_a_near_miss_prefix_in_spark_defaults_is_reported_once_when_the_autoscaler_starts(
        tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    done = run_driver(tmp_path, """
        spark.sparkScale.maxExecutors   20
        spark.sparkscale.eventHandlers  logging,jsonl
    """, f"""
        from pyspark.sql import SparkSession
        from sparkscale_listener import autoscale, stop_autoscaler

        spark = autoscale(SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
                          .config("spark.sparkscale.eventHandlers.jsonl.path", {str(events)!r}))
        stop_autoscaler(spark)
        spark.stop()
    """)
    notices = [e for e in map(json.loads, events.read_text().splitlines())
               if e["kind"] == "notice" and e["details"].get("situation") == "misspelt-prefix"]
    assert [n["reason"] for n in notices] == [
        "spark.sparkScale.maxExecutors='20' is ignored: did you mean spark.sparkscale.maxExecutors? "
        "sparkscale reads only the keys that start with spark.sparkscale."]
    assert notices[0]["severity"] == "warning"
    # The application configured no logging: the driver log has the line, once, with one prefix.
    logged = [line for line in done.stderr.splitlines() if "spark.sparkScale.maxExecutors" in line]
    assert len(logged) == 1, done.stderr[-3000:]
    assert " WARNING sparkscale: notice: spark.sparkScale.maxExecutors='20' is ignored" in logged[0]
