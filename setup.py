"""Compiles the JVM bridge into the wheel. Everything else about the package is in pyproject.toml.

A wheel carries one bridge jar per supported Spark line
(``sparkscale_listener/jars/sparkscale-bridge-<line>.jar``, picked at run time by
``sparkscale_listener.spark.jars``). They are compiled here, while the wheel is built, by running Maven on
``jvm-bridge/`` (which the sdist carries): `python -m build` builds the sdist and then the wheel from it, so a
wheel can only contain what the sdist's sources compile to. Maven downloads the Spark and Scala jars it
compiles against (``provided``: none of them ends up in the wheel) from Maven Central on first use.

An editable install (``pip install -e .``, what ``make env`` does) does not run Maven: it uses the jars that
``make bridge`` writes into the source tree, so the Python side can be installed without a JDK.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
POM = HERE / "jvm-bridge" / "pom.xml"
LINES = ("spark3.5_2.12", "spark3.5_2.13", "spark4_2.13")  # the modules of jvm-bridge/pom.xml
MIN_JDK = 17


class BridgeBuildError(SystemExit):
    """Ends the build with a message (not a traceback): a missing tool is the builder's to install."""

    def __init__(self, message: str) -> None:
        super().__init__(f"error: {message}")


def _java_tool(name: str) -> str | None:
    """Where Maven will find a JDK tool: JAVA_HOME first (Maven itself prefers it), then PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def _check_tools() -> str:
    """Returns the mvn executable; fails, naming what to install, when Maven or a JDK 17+ is missing."""
    missing = []
    mvn = shutil.which("mvn")
    if mvn is None:
        missing.append("Maven 3.8 or newer ('mvn' is not on PATH; Debian/Ubuntu: apt-get install maven)")
    javac = _java_tool("javac")
    if javac is None:
        missing.append(f"a JDK {MIN_JDK} or newer ('javac' is not on PATH or in $JAVA_HOME/bin; a JRE is not "
                       "enough; Debian/Ubuntu: apt-get install openjdk-17-jdk-headless)")
    else:
        run = subprocess.run([javac, "-version"], capture_output=True, text=True, check=False)
        text = (run.stdout + run.stderr).strip()
        match = re.search(r"javac (\d+)", text)
        if match is None or int(match.group(1)) < MIN_JDK:
            missing.append(f"a JDK {MIN_JDK} or newer ({javac} says {text!r}; set JAVA_HOME to a JDK 17)")
    if missing:
        raise BridgeBuildError(
            "building the sparkscale-listener wheel compiles its JVM bridge (jvm-bridge/) with Maven, which "
            "needs " + " and ".join(missing) + f". Install {'it' if len(missing) == 1 else 'them'} and build "
            "again, or install a prebuilt wheel.")
    assert mvn is not None
    return mvn


class BuildPyWithBridge(build_py):
    """build_py, then ``mvn package`` with the jars written into the build directory (not the source tree)."""

    def initialize_options(self) -> None:
        super().initialize_options()
        self.bridge_jars: list[str] = []

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return  # pip install -e: the jars of `make bridge` in the source tree are used
        if not POM.is_file():
            raise BridgeBuildError(f"{POM} is missing: build the wheel from the sdist or a source checkout")
        mvn = _check_tools()
        out = (Path(self.build_lib) / "sparkscale_listener" / "jars").resolve()
        out.mkdir(parents=True, exist_ok=True)
        command = [mvn, "--batch-mode", "--quiet", "-Dstyle.color=never", "-f", str(POM), "package",
                   f"-Dsparkscale.jars.dir={out}"]
        self.announce(f"building the JVM bridge: {' '.join(command)}", level=2)
        result = subprocess.run(command, cwd=POM.parent, check=False)
        if result.returncode != 0:
            raise BridgeBuildError(
                f"Maven failed (exit {result.returncode}) building the JVM bridge; its errors are above. On a"
                " first build Maven downloads Spark's jars from Maven Central: is it reachable?")
        jars = [out / f"sparkscale-bridge-{line}.jar" for line in LINES]
        absent = [jar.name for jar in jars if not jar.is_file()]
        if absent:
            raise BridgeBuildError(f"Maven succeeded but did not write {', '.join(absent)} to {out}")
        self.bridge_jars = [str(jar) for jar in jars]

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), *self.bridge_jars]


setup(cmdclass={"build_py": BuildPyWithBridge})
