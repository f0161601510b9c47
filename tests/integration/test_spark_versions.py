"""The supported Spark lines, each with a real-Spark smoke test: start, scale up, scale down, a
ScalingEvent in the event log (``sparkscale_listener/testing/smoke_job.py`` on local-cluster).

Each older line runs in a virtualenv of its own, with that pyspark from PyPI, made once under
``.venv-spark/`` and reused; the current line is the project's own venv. Every line loads its own
bridge jar through the same ``autoscale()`` call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SMOKE_JOB = REPO / "sparkscale_listener" / "testing" / "smoke_job.py"
# The oldest release tested of each line besides the project's own (the newest 4.x).
OTHER_LINES = ("3.5.7", "4.0.1")
pytestmark = pytest.mark.spark


def python_with_pyspark(version: str | None) -> str:
    """The project's Python (version None), or one of a venv with that pyspark (made once)."""
    if version is None:
        return sys.executable
    venv = REPO / ".venv-spark" / f"pyspark-{version}"
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"pyspark=={version}", "numpy"],
                       check=True)
        (venv / ".installed").touch()
    return str(python)


@pytest.mark.parametrize("version", [*OTHER_LINES, None], ids=[*OTHER_LINES, "current"])
def test_smoke_start_scale_up_scale_down_and_events(version: str | None, tmp_path: Path) -> None:
    python = python_with_pyspark(version)
    env = {**os.environ, "PYTHONPATH": str(REPO), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_HOME", None)
    run = subprocess.run([python, str(SMOKE_JOB), str(tmp_path / "work")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"exit {run.returncode}\n{run.stdout[-2000:]}\n{run.stderr[-4000:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    print(result)
    if version is not None:
        assert result["spark"] == version
    applied = result["applied"]
    assert "scale_up" in applied and "scale_down" in applied[applied.index("scale_up"):], applied
    assert result["scaling_events"] >= 2
    assert run.returncode == 0
