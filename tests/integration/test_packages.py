"""Jars the user asks for keep working beside the bridge: ``spark.jars.packages`` on the builder
and ``spark-submit --packages`` (the way users add Spark's Kafka connector) end up in
``spark.jars`` with the bridge jar, so the executors get both.

Each case runs a fresh driver process (the packages are resolved when the driver JVM starts),
with a small artifact from Maven Central (junit) standing in for a connector.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyspark
import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "junit:junit:4.13.2"
JOB = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from sparkscale_listener import autoscale

    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    if len(sys.argv) > 1:
        builder = builder.config("spark.jars.packages", sys.argv[1])
    spark = autoscale(builder)
    jvm = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    jvm.java.lang.Class.forName("org.junit.Assert", True, loader)  # the package is on the driver
    print("JARS=" + spark.sparkContext.getConf().get("spark.jars"))
    spark.stop()
""")


def run(command: list[str], tmp_path: Path) -> list[str]:
    spark_home = Path(pyspark.__file__).parent
    env = {**os.environ, "SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(REPO)}
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("JARS="))
    return line[len("JARS="):].split(",")


def check(jars: list[str]) -> None:
    assert any(j.endswith("junit-4.13.2.jar") for j in jars), jars
    bridge = [j for j in jars if "sparkscale-bridge-" in j]
    assert len(bridge) == 1, jars  # once, however spark-submit spelled it


def test_spark_jars_packages_on_the_builder(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    check(run([sys.executable, str(job), PACKAGE], tmp_path))


def test_spark_submit_packages(tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    spark_submit = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")
    check(run([spark_submit, "--packages", PACKAGE, str(job)], tmp_path))
