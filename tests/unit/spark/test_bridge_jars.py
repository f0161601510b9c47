"""Choosing the bridge jar for a Spark version: pure (fake Spark homes, a fake py4j JVM), no Spark started."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pytest

from sparkscale_listener.spark import jars as bridge_jars
from sparkscale_listener.spark.jars import (
    LINES,
    BridgeJarNotFoundError,
    bridge_jar,
    installed_versions,
    jar_name,
    jar_path,
    line_for,
    running_versions,
    scala_binary_version,
)

REPO = Path(__file__).resolve().parents[3]


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def spark_home(root: Path, spark: str, scala: str, layout: str = "jars") -> Path:
    """A directory that looks like a Spark installation: its jars dir holds spark-core and scala-library."""
    touch(root / layout / f"spark-core_{scala}-{spark}.jar")
    touch(root / layout / f"scala-library-{scala}.8.jar")
    touch(root / layout / "jackson-core-2.15.2.jar")
    return root


@pytest.fixture
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither SPARK_HOME nor the pyspark package: each test supplies what it needs."""
    monkeypatch.delenv("SPARK_HOME", raising=False)
    monkeypatch.setattr(bridge_jars, "_pyspark_dir", lambda: None)
    monkeypatch.setattr(bridge_jars, "_pyspark_version", lambda: None)


# ---------------------------------------------------------------- versions -> line


@pytest.mark.parametrize(
    ("spark", "scala", "line"),
    [
        ("3.5.0", "2.12", "spark3.5_2.12"),
        ("3.5.7", "2.12.18", "spark3.5_2.12"),
        ("3.5.7", "2.13", "spark3.5_2.13"),
        ("3.5.2-amzn-1", "2.13.8", "spark3.5_2.13"),
        ("4.0.0", "2.13", "spark4_2.13"),
        ("4.0.1", "2.13.16", "spark4_2.13"),
        ("4.1.0.dev0", "2.13", "spark4_2.13"),
        ("4.3.0", "2.13.18", "spark4_2.13"),
    ],
)
def test_supported_versions_map_to_their_line(spark: str, scala: str, line: str) -> None:
    assert line_for(spark, scala) == line
    assert line in LINES


@pytest.mark.parametrize(
    ("spark", "scala"),
    [("3.4.3", "2.12"), ("3.3.0", "2.13"), ("4.0.1", "2.12"), ("5.0.0", "2.13"), ("3.5.1", "3.3")],
)
def test_unsupported_versions_say_what_is_supported(spark: str, scala: str) -> None:
    with pytest.raises(BridgeJarNotFoundError) as caught:
        line_for(spark, scala)
    message = str(caught.value)
    assert spark in message and scala in message
    assert "Spark 3.5" in message and "Spark 4.x" in message
    assert "spark.sparkscale.enabled=false" in message


@pytest.mark.parametrize(("spark", "scala"), [("", "2.13"), ("four", "2.13"), ("4.0.1", ""), ("4.0.1", "x")])
def test_unreadable_versions_are_refused(spark: str, scala: str) -> None:
    with pytest.raises(BridgeJarNotFoundError, match="cannot read Spark version"):
        line_for(spark, scala)


def test_the_error_is_a_runtime_error() -> None:
    # Callers that guard Spark start-up with `except RuntimeError` catch it too.
    assert issubclass(BridgeJarNotFoundError, RuntimeError)


@pytest.mark.parametrize(
    ("text", "binary"),
    [("2.13.16", "2.13"), ("2.12", "2.12"), ("2.13.0-RC1", "2.13"), ("3.3.4", "3.3"), ("x", None),
     ("", None)],
)
def test_scala_binary_version(text: str, binary: str | None) -> None:
    assert scala_binary_version(text) == binary


# ---------------------------------------------------------------- line -> jar


def test_jar_path_returns_the_lines_jar(tmp_path: Path) -> None:
    for line in LINES:
        touch(tmp_path / jar_name(line))
    assert jar_path("3.5.7", "2.12", tmp_path) == tmp_path / "sparkscale-bridge-spark3.5_2.12.jar"
    assert jar_path("3.5.7", "2.13.8", tmp_path) == tmp_path / "sparkscale-bridge-spark3.5_2.13.jar"
    assert jar_path("4.3.0", "2.13", tmp_path) == tmp_path / "sparkscale-bridge-spark4_2.13.jar"


def test_a_missing_jar_names_what_exists_and_what_to_do(tmp_path: Path) -> None:
    touch(tmp_path / jar_name("spark3.5_2.12"))
    touch(tmp_path / "sparkscale-bridge.jar")  # the old single jar: listed, never chosen
    with pytest.raises(BridgeJarNotFoundError) as caught:
        jar_path("4.0.1", "2.13.16", tmp_path)
    message = str(caught.value)
    assert "Spark 4.0.1 / Scala 2.13" in message
    assert "sparkscale-bridge-spark4_2.13.jar" in message
    assert "sparkscale-bridge-spark3.5_2.12.jar" in message
    assert str(tmp_path) in message
    assert "make bridge" in message and "wheel" in message


def test_an_empty_or_absent_jar_directory_says_so(tmp_path: Path) -> None:
    with pytest.raises(BridgeJarNotFoundError, match="no bridge jar"):
        jar_path("4.0.1", "2.13", tmp_path / "absent")


def test_the_jar_directory_is_where_the_build_writes_the_jars() -> None:
    # `make bridge` (the Makefile's JAR) and the wheel (setup.py) write sparkscale_listener/jars/.
    package = Path(bridge_jars.__file__).resolve().parents[1]
    assert bridge_jars.JARS_DIR == package / "jars"
    repo = package.parent
    assert "sparkscale_listener/jars/sparkscale-bridge-" in (repo / "Makefile").read_text()
    assert '"sparkscale_listener" / "jars"' in (repo / "setup.py").read_text()


# ---------------------------------------------------------------- detection from files


def test_pip_package_jars_give_both_versions(tmp_path: Path, no_environment: None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    package = spark_home(tmp_path / "site-packages" / "pyspark", "4.3.0", "2.13")
    monkeypatch.setattr(bridge_jars, "_pyspark_dir", lambda: package)
    monkeypatch.setattr(bridge_jars, "_pyspark_version", lambda: "4.3.0")
    assert installed_versions() == ("4.3.0", "2.13")


def test_spark_home_wins_over_the_pip_package(tmp_path: Path, no_environment: None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # pyspark launches $SPARK_HOME's Spark when it is set, whatever pip installed.
    package = spark_home(tmp_path / "pyspark", "4.3.0", "2.13")
    distribution = spark_home(tmp_path / "spark-3.5.7-bin-hadoop3-scala2.13", "3.5.7", "2.13")
    monkeypatch.setattr(bridge_jars, "_pyspark_dir", lambda: package)
    monkeypatch.setattr(bridge_jars, "_pyspark_version", lambda: "4.3.0")
    monkeypatch.setenv("SPARK_HOME", str(distribution))
    assert installed_versions() == ("3.5.7", "2.13")


def test_an_explicit_home_wins_over_everything(tmp_path: Path, no_environment: None,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_HOME", str(spark_home(tmp_path / "a", "4.0.1", "2.13")))
    assert installed_versions(spark_home(tmp_path / "b", "3.5.2", "2.12")) == ("3.5.2", "2.12")


def test_a_spark_home_without_jars_falls_back_to_the_pip_package(tmp_path: Path, no_environment: None,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    package = spark_home(tmp_path / "pyspark", "3.5.7", "2.12")
    (tmp_path / "empty-home").mkdir()
    monkeypatch.setattr(bridge_jars, "_pyspark_dir", lambda: package)
    monkeypatch.setenv("SPARK_HOME", str(tmp_path / "empty-home"))
    assert installed_versions() == ("3.5.7", "2.12")


def test_a_source_build_is_read_from_its_assembly(tmp_path: Path, no_environment: None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    home = spark_home(tmp_path / "spark", "4.2.0-SNAPSHOT", "2.13", layout="assembly/target/scala-2.13/jars")
    monkeypatch.setenv("SPARK_HOME", str(home))
    assert installed_versions() == ("4.2.0-SNAPSHOT", "2.13")


def test_test_and_source_jars_are_not_mistaken_for_spark_core(tmp_path: Path, no_environment: None) -> None:
    home = spark_home(tmp_path / "spark", "4.0.1", "2.13")
    touch(home / "jars" / "spark-core_2.13-4.0.1-tests.jar")
    touch(home / "jars" / "spark-core_2.13-4.0.1-sources.jar")
    assert installed_versions(home) == ("4.0.1", "2.13")


def test_two_spark_core_versions_are_an_error(tmp_path: Path, no_environment: None) -> None:
    home = spark_home(tmp_path / "spark", "4.0.1", "2.13")
    touch(home / "jars" / "spark-core_2.12-3.5.7.jar")
    with pytest.raises(BridgeJarNotFoundError, match="several versions") as caught:
        installed_versions(home)
    assert "Spark 4.0.1 / Scala 2.13" in str(caught.value) and "Spark 3.5.7 / Scala 2.12" in str(caught.value)


def test_without_spark_core_the_pyspark_version_and_scala_library_are_used(
        tmp_path: Path, no_environment: None, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "spark"
    touch(home / "jars" / "scala-library-2.13.8.jar")
    monkeypatch.setattr(bridge_jars, "_pyspark_version", lambda: "3.5.7")
    assert installed_versions(home) == ("3.5.7", "2.13")


@pytest.mark.parametrize(("pyspark_version", "scala"),
                         [("3.5.7", "2.12"), ("4.0.1", "2.13"), ("4.3.0", "2.13")])
def test_with_no_jars_at_all_the_lines_default_scala_is_assumed(
        tmp_path: Path, no_environment: None, monkeypatch: pytest.MonkeyPatch, pyspark_version: str,
        scala: str) -> None:
    (tmp_path / "spark").mkdir()
    monkeypatch.setattr(bridge_jars, "_pyspark_version", lambda: pyspark_version)
    assert installed_versions(tmp_path / "spark") == (pyspark_version, scala)


def test_nothing_to_go_by_is_an_error_saying_what_to_install(tmp_path: Path, no_environment: None) -> None:
    with pytest.raises(BridgeJarNotFoundError, match="pip install pyspark") as caught:
        installed_versions()
    assert "SPARK_HOME" in str(caught.value)


# ---------------------------------------------------------------- detection from a running JVM


def fake_jvm(spark: str, scala: str) -> SimpleNamespace:
    """What py4j's JVM view answers for the two static calls running_versions makes."""
    package = SimpleNamespace(SPARK_VERSION=lambda: spark)
    properties = SimpleNamespace(versionNumberString=lambda: scala)
    return SimpleNamespace(
        org=SimpleNamespace(apache=SimpleNamespace(spark=SimpleNamespace(package=package))),
        scala=SimpleNamespace(util=SimpleNamespace(Properties=properties)),
    )


def test_running_versions_asks_the_jvm() -> None:
    assert running_versions(fake_jvm("4.0.1", "2.13.16")) == ("4.0.1", "2.13")
    assert running_versions(fake_jvm("3.5.7", "2.12.18")) == ("3.5.7", "2.12")


def test_a_jvm_reporting_no_scala_version_is_an_error() -> None:
    with pytest.raises(BridgeJarNotFoundError, match="Scala version"):
        running_versions(fake_jvm("4.0.1", "unknown"))


def test_bridge_jar_prefers_the_running_jvm_over_the_files(tmp_path: Path, no_environment: None,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for line in LINES:
        touch(tmp_path / "jars" / jar_name(line))
    monkeypatch.setenv("SPARK_HOME", str(spark_home(tmp_path / "spark", "4.3.0", "2.13")))
    jars = tmp_path / "jars"
    assert bridge_jar(jars_dir=jars) == jars / "sparkscale-bridge-spark4_2.13.jar"
    assert bridge_jar(fake_jvm("3.5.7", "2.12.18"), jars) == jars / "sparkscale-bridge-spark3.5_2.12.jar"


# ---------------------------------------------------------------- the build agrees


def test_every_line_is_a_module_of_the_maven_build() -> None:
    """LINES, jvm-bridge/pom.xml's modules, their artifactIds (hence jar names) and setup.py must agree."""
    pom = REPO / "jvm-bridge" / "pom.xml"
    if not pom.is_file():
        pytest.skip("no jvm-bridge/ (an installed package, not a source checkout)")
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    modules = [m.text for m in ET.parse(pom).getroot().findall("m:modules/m:module", ns)]
    assert sorted(Path(str(m)).name for m in modules) == sorted(LINES)
    for module in modules:
        artifact = ET.parse(pom.parent / str(module) / "pom.xml").getroot().find("m:artifactId", ns)
        assert artifact is not None and f"{artifact.text}.jar" == jar_name(Path(str(module)).name)
    setup_lines = re.search(r"^LINES = \(([^)]*)\)", (REPO / "setup.py").read_text(), re.MULTILINE)
    assert setup_lines is not None
    assert sorted(re.findall(r'"([^"]+)"', setup_lines.group(1))) == sorted(LINES)
