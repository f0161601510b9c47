"""Installed and run the way users deploy: the built wheel in a fresh virtualenv outside the
source tree, a job submitted with ``spark-submit`` (no ``--jars``, no ``--conf spark.plugins``) to
a standalone Master and Worker started as separate daemon processes.

The Worker hands the application every free core at start (3 one-core executors); the autoscaler
gives back what the low load does not need (never below the minExecutors=2 given on the command
line) and scales up when the load steps up; every row reaches the sink exactly once, and the
ScalingEvents are in the event log. (A scale-down after a scale-up is test_autoscaler_spark's.)
Every wait is a condition with a deadline.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from spark_cluster import QUICK_SCALE_DOWN, TEST_JVM_OPTIONS, free_port

from sparkscale_listener.testing.demo import read_event_log, wait_for

REPO = Path(__file__).resolve().parents[2]
WORKER_CORES = 3
pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel built (``python -m build``, isolated) from a copy of the files
    git tracks here: what a clean clone holds, and no build output left in the working tree; pip
    installs the wheel into it."""
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], check=True,
                             capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, tracked):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)],
                   check=True, capture_output=True, text=True)
    [wheel] = out.glob("sparkscale_listener-*.whl")
    venv = tmp_path_factory.mktemp("venv")
    # No pip of the venv's own (ensurepip took 5 s): this interpreter's pip installs into it
    # (--python runs pip under the venv's interpreter, so its markers and site-packages are the venv's).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    import pyspark

    # The cluster's own pyspark stays what it is: install the same version next to the wheel.
    # pyarrow: the job's test source is a Python data source, which needs it (the package does not).
    # The wheel's own dependencies (numpy) come from its metadata. pip byte-compiles, as for users:
    # --no-compile saved 5 s here, but the job's driver and Python workers then compiled at import.
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
                    "--quiet", str(wheel), f"pyspark=={pyspark.__version__}", "pyarrow"], check=True)
    return venv


def test_the_wheel_carries_its_type_marker_and_one_version(wheel_venv: Path) -> None:
    import sparkscale_listener

    probe = ("import importlib.metadata as m, pathlib, sparkscale_listener as s; "
             "print(m.version('sparkscale-listener'), s.__version__, "
             "(pathlib.Path(s.__file__).parent / 'py.typed').is_file())")
    out = subprocess.run([str(wheel_venv / "bin" / "python"), "-c", probe], check=True, capture_output=True,
                         text=True, cwd=wheel_venv).stdout.split()
    assert out == [sparkscale_listener.__version__, sparkscale_listener.__version__, "True"]


def venv_env(venv: Path) -> dict[str, str]:
    """The environment of a shell that activated ``venv``: Spark's launch scripts find their
    SPARK_HOME (pyspark's package folder) through the ``python`` on PATH."""
    spark_home = subprocess.run([str(venv / "bin" / "python"), "-c",
                                 "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
                                check=True, capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", SPARK_HOME=spark_home,
               VIRTUAL_ENV=str(venv), SPARK_LOCAL_IP="127.0.0.1")
    return env


@dataclass
class Standalone:
    master_url: str
    web_url: str


def _worker_registered(web_url: str, daemons: dict[str, tuple[subprocess.Popen[bytes], Path]]) -> bool:
    """True once the Master's status lists a live Worker. A daemon that exited fails the wait at once,
    with its log's tail; a status page that is not whole yet (the Master starting) reads as not yet."""
    for name, (process, log) in daemons.items():
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the {name} exited with {process.returncode} before a Worker registered:\n"
                               f"{tail}")
    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=5) as response:
            return json.load(response).get("aliveworkers", 0) >= 1
    except (OSError, ValueError, http.client.HTTPException):
        return False


@pytest.fixture(scope="module")
def standalone(wheel_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """A Master and one Worker, each its own daemon process, on loopback ports of their own."""
    work = tmp_path_factory.mktemp("standalone")
    spark_class = str(wheel_venv / "bin" / "spark-class")
    port, web, worker_web = free_port(), free_port(), free_port()
    env = {**venv_env(wheel_venv), "SPARK_LOG_DIR": str(work), "SPARK_WORKER_DIR": str(work / "worker"),
           "SPARK_DAEMON_JAVA_OPTS": TEST_JVM_OPTIONS}
    logs = [open(work / name, "w") for name in ("master.log", "worker.log")]
    master = subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(web)],
                              env=env, stdout=logs[0], stderr=subprocess.STDOUT)
    worker = subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker",
                               f"spark://127.0.0.1:{port}", "--cores", str(WORKER_CORES), "--memory", "3g",
                               "--webui-port", str(worker_web), "--work-dir", str(work / "worker")],
                              env=env, stdout=logs[1], stderr=subprocess.STDOUT)
    web_url = f"http://127.0.0.1:{web}"
    try:
        daemons = {"Master": (master, work / "master.log"), "Worker": (worker, work / "worker.log")}
        wait_for(lambda: _worker_registered(web_url, daemons), 120,
                 what="the Worker to register with the Master")
        yield Standalone(f"spark://127.0.0.1:{port}", web_url)
    finally:
        for process in (worker, master):
            process.terminate()
        for process in (worker, master):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()


def test_submitted_job_from_the_installed_wheel_scales_down_then_up(
        wheel_venv: Path, standalone: Standalone, tmp_path: Path) -> None:
    job = tmp_path / "job.py"  # a copy outside the source tree: only the wheel is importable
    shutil.copy(REPO / "sparkscale_listener" / "testing" / "submitted_job.py", job)
    work = tmp_path / "work"
    work.mkdir()
    env = {**venv_env(wheel_venv), "PYSPARK_PYTHON": str(wheel_venv / "bin" / "python")}
    started = time.monotonic()
    run = subprocess.run([str(wheel_venv / "bin" / "spark-submit"), "--master", standalone.master_url,
                          "--driver-java-options", TEST_JVM_OPTIONS,
                          "--conf", "spark.executor.cores=1", "--conf", "spark.executor.memory=512m",
                          "--conf", "spark.sparkscale.minExecutors=2",  # a setting from the command line
                          str(job), str(work), *(f"{k}={v}" for k, v in QUICK_SCALE_DOWN.items())],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    print(run.stdout[-4000:])
    result_lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert result_lines, f"no RESULT line; exit {run.returncode}\n{run.stderr[-4000:]}"
    result = json.loads(result_lines[-1][len("RESULT "):])
    applied = [(a["action"], a["from_executors"], a["to_executors"]) for a in result["applied"]]
    print(f"applied {applied} in {time.monotonic() - started:.0f}s; rows {result['rows']}")
    # A scaling line is in the driver log by default (spark-submit merges the Python driver's
    # stderr into its own stdout).
    assert "INFO sparkscale: scale_down 3 -> 2" in run.stdout + run.stderr
    assert "sparkscale: sparkscale" not in run.stdout + run.stderr  # the logger name once, no second prefix
    # Started with every core the Worker had, and gave back what the low load did not need.
    assert applied[0][0] == "scale_down" and applied[0][1] == WORKER_CORES, applied
    # spark-submit's --conf reached the autoscaler: it never went below minExecutors=2.
    assert min(a[2] for a in applied) == 2, applied
    assert any(a[0] == "scale_up" for a in applied[1:]), applied
    assert result["exactly_once"] and result["rows"] > 0
    assert run.returncode == 0, run.stderr[-4000:]
    events = [e for e in read_event_log(work / "events")
              if e.get("Event") == "io.sparkscale.bridge.ScalingEvent" and e.get("applied")]
    assert [(e["action"], e["fromExecutors"], e["toExecutors"]) for e in events] == applied
