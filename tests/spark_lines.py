"""The Spark lines the suite runs on besides the project's own pyspark (the newest 4.x, in .venv).

Each older line gets a virtualenv of its own under ``.venv-spark/`` with that pyspark from PyPI, made
once and reused, and Spark's Kafka connector for it (resolved by Maven, see tests/kafka_broker.py).
``make spark-lines`` (a step of ``make test``) prepares them before any test runs, so that their
downloads are set-up time, not a test's; a test that finds one missing makes it itself.

    python tests/spark_lines.py
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The oldest release tested of each older line, with the Scala version of its pyspark package.
OLDER_LINES: dict[str, str] = {"3.5.7": "2.12", "4.0.1": "2.13"}


def python_with_pyspark(version: str | None) -> str:
    """The project's Python (version None), or the one of a virtualenv with that pyspark (made once)."""
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


def pyspark_home(version: str | None) -> Path:
    """The pyspark package folder of that line (a SPARK_HOME: bin/, jars/)."""
    where = "import os, pyspark; print(os.path.dirname(pyspark.__file__))"
    out = subprocess.run([python_with_pyspark(version), "-c", where], capture_output=True, text=True,
                         check=True)
    return Path(out.stdout.strip())


def main() -> int:
    from kafka_broker import connector_jars

    from sparkscale_listener.spark.jars import installed_versions

    lines: dict[str | None, str] = {None: installed_versions()[1], **OLDER_LINES}
    # The older lines' virtualenvs made side by side: each is mostly pip waiting on the download
    # and the unpacking of a 300 MB wheel (on a fresh clone, 18 s one after the other).
    with ThreadPoolExecutor(max_workers=max(1, len(OLDER_LINES))) as pool:
        list(pool.map(python_with_pyspark, OLDER_LINES))
    for version, scala in lines.items():
        home = pyspark_home(version)
        spark_version = version or installed_versions()[0]
        connector, _ = connector_jars(spark_version, scala, home / "jars")
        print(f"Spark {spark_version} (Scala {scala}): {home}; Kafka connector {connector}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
