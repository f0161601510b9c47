"""The settings a driver JVM not yet launched will start with (spark-defaults.conf, PYSPARK_SUBMIT_ARGS)
are read before ``getOrCreate()``, so every refusal comes before any Spark starts. No Spark starts
here: the session test runs in its own interpreter, where launching a JVM fails the test."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from sparkscale_listener.spark.launch_conf import defaults_file, launch_conf, parse_properties


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_properties_syntax_as_java_reads_it() -> None:
    text = textwrap.dedent("""\
        # a comment
        ! another comment
        spark.dynamicAllocation.enabled   true
        spark.sparkscale.maxExecutors=8
        spark.sparkscale.minExecutors : 2
        spark.sparkscale.interval = 30s   \t
          spark.jars  /a.jar,\\
                      /b.jar
        spark.key\\=with\\:escapes  value
        spark.unicode \\u00e9t\\u00e9
        spark.empty
    """)
    assert parse_properties(text) == {
        "spark.dynamicAllocation.enabled": "true",
        "spark.sparkscale.maxExecutors": "8",
        "spark.sparkscale.minExecutors": "2",
        "spark.sparkscale.interval": "30s",
        "spark.jars": "/a.jar,/b.jar",
        "spark.key=with:escapes": "value",
        "spark.unicode": "été",
        "spark.empty": "",
    }


def test_defaults_file_is_found_where_spark_submit_looks(tmp_path: Path) -> None:
    assert defaults_file({"SPARK_CONF_DIR": str(tmp_path)}) == tmp_path / "spark-defaults.conf"
    assert defaults_file({"SPARK_HOME": "/opt/spark"}) == Path("/opt/spark/conf/spark-defaults.conf")
    assert defaults_file({"SPARK_CONF_DIR": str(tmp_path), "SPARK_HOME": "/opt/spark"}).parent == tmp_path
    import pyspark

    # No SPARK_HOME: pyspark launches the Spark it ships, and so reads its conf directory.
    pip_home = Path(pyspark.__file__).parent
    assert defaults_file({}) == pip_home / "conf" / "spark-defaults.conf"


def test_precedence_is_spark_submits(tmp_path: Path) -> None:
    write(tmp_path / "conf" / "spark-defaults.conf", """
        spark.sparkscale.maxExecutors 8
        spark.sparkscale.minExecutors 2
        spark.dynamicAllocation.enabled true
        not.a.spark.key 1
    """)
    extra = write(tmp_path / "extra.conf", "spark.sparkscale.minExecutors 3\nspark.sparkscale.interval 5s\n")
    env = {"SPARK_CONF_DIR": str(tmp_path / "conf")}
    assert launch_conf(env) == {"spark.sparkscale.maxExecutors": "8", "spark.sparkscale.minExecutors": "2",
                                "spark.dynamicAllocation.enabled": "true"}
    # --conf (each spelling spark-submit accepts) beats the file.
    env["PYSPARK_SUBMIT_ARGS"] = ("--master local[2] --conf spark.sparkscale.maxExecutors=5 "
                                  "--conf=spark.sparkscale.interval=20s -c 'spark.app.name=a b' "
                                  "pyspark-shell")
    assert launch_conf(env) == {"spark.sparkscale.maxExecutors": "5", "spark.sparkscale.minExecutors": "2",
                                "spark.dynamicAllocation.enabled": "true", "spark.sparkscale.interval": "20s",
                                "spark.app.name": "a b"}
    # --properties-file replaces spark-defaults.conf ...
    env["PYSPARK_SUBMIT_ARGS"] = f"--properties-file {extra} pyspark-shell"
    assert launch_conf(env) == {"spark.sparkscale.minExecutors": "3", "spark.sparkscale.interval": "5s"}
    # ... unless --load-spark-defaults (Spark 4) asks for both; the properties file wins.
    env["PYSPARK_SUBMIT_ARGS"] = f"--load-spark-defaults --properties-file={extra} pyspark-shell"
    assert launch_conf(env) == {"spark.sparkscale.maxExecutors": "8", "spark.sparkscale.minExecutors": "3",
                                "spark.dynamicAllocation.enabled": "true", "spark.sparkscale.interval": "5s"}


def test_missing_files_and_bad_arguments_are_left_to_spark_submit(tmp_path: Path) -> None:
    assert launch_conf({"SPARK_CONF_DIR": str(tmp_path / "none")}) == {}
    assert launch_conf({"SPARK_CONF_DIR": str(tmp_path), "PYSPARK_SUBMIT_ARGS": "--conf 'unbalanced"}) == {}
    assert launch_conf({"SPARK_CONF_DIR": str(tmp_path),
                        "PYSPARK_SUBMIT_ARGS": f"--properties-file {tmp_path / 'absent.conf'}"}) == {}


SESSION = """
import sys
from pyspark import SparkContext
from pyspark.sql import SparkSession

def no_jvm(*args, **kwargs):
    raise AssertionError("a driver JVM was about to be launched")

SparkContext._ensure_initialized = classmethod(no_jvm)  # the only way pyspark launches one
from sparkscale_listener import ConfigError, autoscale

try:
    autoscale(SparkSession.builder.master("local[1]").config("spark.sparkscale.mode", "recommend"))
except ConfigError as err:
    print("REFUSED", err)
print("context", SparkContext._active_spark_context, "gateway", SparkContext._gateway)
"""


def refused(tmp_path: Path, defaults: str, submit_args: str | None = None) -> str:
    write(tmp_path / "conf" / "spark-defaults.conf", defaults)
    env = {k: v for k, v in __import__("os").environ.items()
           if k not in ("SPARK_HOME", "PYSPARK_SUBMIT_ARGS", "PYSPARK_GATEWAY_PORT")}
    env["SPARK_CONF_DIR"] = str(tmp_path / "conf")
    if submit_args is not None:
        env["PYSPARK_SUBMIT_ARGS"] = submit_args
    done = subprocess.run([sys.executable, "-c", SESSION], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "context None gateway None"  # no Spark started, not even the JVM
    return done.stdout


def test_dynamic_allocation_in_spark_defaults_is_refused_before_any_spark_starts(tmp_path: Path) -> None:
    out = refused(tmp_path, "spark.dynamicAllocation.enabled  true\n")
    assert "REFUSED spark.dynamicAllocation.enabled=true: Spark's allocation manager would overwrite" in out


def test_a_bad_value_in_spark_defaults_or_submit_args_is_refused_before_any_spark_starts(
        tmp_path: Path) -> None:
    out = refused(tmp_path, "spark.sparkscale.scaleDownInterval 300000\n")
    assert "REFUSED spark.sparkscale.scaleDownInterval='300000' was read as 300000 s (83.3 h)" in out
    out = refused(tmp_path, "", "--conf spark.sparkscale.maxExecutor=4 pyspark-shell")
    assert "REFUSED spark.sparkscale.maxExecutor='4' is not a known key; did you mean" in out
