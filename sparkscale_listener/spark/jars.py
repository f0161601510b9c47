"""Which JVM bridge jar fits the Spark that runs, or will run, this driver.

The Java side of the bridge (``jvm-bridge/``) is compiled once per Spark line, because the lines are not
binary compatible: Spark 3.5 serves its UI with ``javax.servlet`` and Spark 4 with ``jakarta.servlet``, and
Scala 2.12 and 2.13 builds of Spark 3.5 disagree on the collection types in Spark's method signatures. A jar
built for the wrong line fails inside the driver with NoClassDefFoundError or NoSuchMethodError, long after
the session looked healthy, so the jar is chosen here, up front, with an error that says what to do.

``spark.jars`` reaches the driver's classpath only when the driver JVM starts, so the choice usually has to be
made before any JVM exists: :func:`installed_versions` reads the versions from the files pyspark will launch
(no JVM, no py4j). When a JVM already runs, :func:`running_versions` asks it, which is the truth even if
``SPARK_HOME`` changed since. :func:`bridge_jar` does whichever applies.

The wheel carries every line's jar (``sparkscale_listener/jars/sparkscale-bridge-<line>.jar``); in a source
checkout ``make bridge`` builds them with Maven.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

JARS_DIR = Path(__file__).resolve().parent.parent / "jars"  # sparkscale_listener/jars (pom.xml, setup.py)
JAR_PREFIX = "sparkscale-bridge-"

# One entry per module of jvm-bridge/pom.xml: line name -> what it serves (for messages).
LINES: dict[str, str] = {
    "spark3.5_2.12": "Spark 3.5.x, Scala 2.12",
    "spark3.5_2.13": "Spark 3.5.x, Scala 2.13",
    "spark4_2.13": "Spark 4.x (4.0.0 and later), Scala 2.13",
}
SUPPORTED = "Spark 3.5 (Scala 2.12 or 2.13) and Spark 4.x (Scala 2.13)"

_SPARK_CORE_JAR = re.compile(r"^spark-core_(?P<scala>\d+\.\d+)-(?P<spark>\d+\.\d+[^/]*)\.jar$")
_SCALA_LIBRARY_JAR = re.compile(r"^scala-library-(?P<scala>\d+\.\d+)[.\d]*\.jar$")


class BridgeJarNotFoundError(RuntimeError):
    """No bridge jar fits this Spark: an unsupported Spark or Scala version, a jar that was not built, or
    versions that could not be determined. The message names what was found and what to do."""


def jar_name(line: str) -> str:
    """The file name of a line's jar, e.g. ``sparkscale-bridge-spark4_2.13.jar``."""
    return f"{JAR_PREFIX}{line}.jar"


def line_for(spark_version: str, scala_version: str) -> str:
    """The bridge line (a key of :data:`LINES`) that serves this Spark and Scala version.

    ``spark_version`` is Spark's own version string (``"3.5.7"``, ``"4.1.0.dev0"``); only major.minor matter,
    because a line's jar is compiled against the line's oldest release and links against every later one.
    ``scala_version`` may be binary (``"2.13"``) or full (``"2.13.16"``).
    """
    spark = _major_minor(spark_version)
    scala = scala_binary_version(scala_version)
    if spark is None or scala is None:
        raise BridgeJarNotFoundError(
            f"cannot read Spark version {spark_version!r} / Scala version {scala_version!r}: expected "
            "something like '4.0.1' and '2.13'")
    major, minor = spark
    if (major, minor) == (3, 5) and scala in ("2.12", "2.13"):
        return f"spark3.5_{scala}"
    if major == 4 and scala == "2.13":
        return "spark4_2.13"
    raise BridgeJarNotFoundError(
        f"sparkscale's JVM bridge supports {SUPPORTED}; this is Spark {spark_version} with Scala {scala}. "
        "Run the application on a supported Spark, or set spark.sparkscale.enabled=false to run it without "
        "the autoscaler.")


def jar_path(spark_version: str, scala_version: str, jars_dir: Path | None = None) -> Path:
    """The bridge jar for this Spark and Scala version; raises :class:`BridgeJarNotFoundError` when the
    versions are not supported or the jar is missing (an editable install before ``make bridge``)."""
    directory = JARS_DIR if jars_dir is None else Path(jars_dir)
    line = line_for(spark_version, scala_version)
    path = directory / jar_name(line)
    if path.is_file():
        return path
    present = [p.name for p in available_jars(directory)]
    raise BridgeJarNotFoundError(
        f"no sparkscale bridge jar for Spark {spark_version} / Scala {scala_binary_version(scala_version)}: "
        f"expected {path.name} in {directory}, which holds "
        f"{', '.join(present) if present else 'no bridge jar'}. In a source checkout build the jars with "
        "`make bridge` (needs a JDK 17 and Maven); otherwise reinstall sparkscale-listener from a wheel, "
        "which carries the jars of every supported Spark line.")


def available_jars(jars_dir: Path | None = None) -> list[Path]:
    """The bridge jars present, sorted by name."""
    directory = JARS_DIR if jars_dir is None else Path(jars_dir)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob(f"{JAR_PREFIX}*.jar") if p.is_file())


def scala_binary_version(version: str) -> str | None:
    """``"2.13.16"`` or ``"2.13"`` -> ``"2.13"``; None when the text is no Scala version."""
    match = re.match(r"^\s*(\d+)\.(\d+)(?:\.\d+)?(?:[-+.].*)?\s*$", version or "")
    return f"{match.group(1)}.{match.group(2)}" if match else None


# ---------------------------------------------------------------- detection without a JVM


def installed_versions(spark_home: str | os.PathLike[str] | None = None) -> tuple[str, str]:
    """``(spark_version, scala_binary_version)`` of the Spark pyspark will launch, read from files.

    pyspark launches ``$SPARK_HOME/bin/spark-submit`` when ``SPARK_HOME`` is set and the copy inside the
    pyspark package otherwise (a pip install), so the same home is examined here (``spark_home`` overrides
    both). Its ``jars/spark-core_<scala>-<spark>.jar`` names both versions; a distribution's version wins over
    ``pyspark.__version__``, which may differ when ``SPARK_HOME`` points to another Spark than the pip one.

    Fallbacks, in order: a source build's ``assembly/target/scala-*/jars``; the pip package when
    ``SPARK_HOME`` holds no Spark jars; then ``pyspark.__version__`` with the Scala version of a
    ``scala-library`` jar or, with no jar at all, the line's default Scala (2.13 for Spark 4, the only one it
    has; 2.12 for Spark 3.5, the Scala of its pip package and default distribution).
    """
    homes = _candidate_homes(spark_home)
    for home in homes:
        for jars in _jar_dirs(home):
            found = _spark_core_versions(jars)
            if len(found) == 1:
                return found[0]
            if len(found) > 1:
                listed = ", ".join(f"Spark {s} / Scala {c}" for s, c in found)
                raise BridgeJarNotFoundError(
                    f"{jars} holds spark-core jars of several versions ({listed}); fix that Spark "
                    "installation, or pass the versions to sparkscale_listener.spark.jars.jar_path()")
    spark_version = _pyspark_version()
    if spark_version is None:
        where = ", ".join(str(h) for h in homes) or "nowhere (SPARK_HOME unset, pyspark not installed)"
        raise BridgeJarNotFoundError(
            f"cannot tell which Spark will run: no spark-core jar under {where} and pyspark is not "
            "importable. Install pyspark (pip install pyspark) or set SPARK_HOME to a Spark distribution.")
    for home in homes:
        for jars in _jar_dirs(home):
            scala = _scala_library_version(jars)
            if scala is not None:
                return spark_version, scala
    major_minor = _major_minor(spark_version)
    return spark_version, "2.13" if major_minor is not None and major_minor[0] >= 4 else "2.12"


def _candidate_homes(spark_home: str | os.PathLike[str] | None) -> list[Path]:
    if spark_home is not None:
        return [Path(spark_home)]
    homes = []
    env = os.environ.get("SPARK_HOME")
    if env:
        homes.append(Path(env))
    package = _pyspark_dir()
    if package is not None:
        homes.append(package)
    return homes


def _jar_dirs(home: Path) -> list[Path]:
    dirs = [home / "jars"]
    dirs += sorted((home / "assembly" / "target").glob("scala-*/jars"))
    return [d for d in dirs if d.is_dir()]


def _spark_core_versions(jars: Path) -> list[tuple[str, str]]:
    found = set()
    for path in jars.glob("spark-core_*.jar"):
        match = _SPARK_CORE_JAR.match(path.name)
        if match and not path.name.endswith(("-tests.jar", "-sources.jar")):
            found.add((match.group("spark"), match.group("scala")))
    return sorted(found)


def _scala_library_version(jars: Path) -> str | None:
    for path in sorted(jars.glob("scala-library-*.jar")):
        match = _SCALA_LIBRARY_JAR.match(path.name)
        if match:
            return match.group("scala")
    return None


def _pyspark_dir() -> Path | None:
    # find_spec locates the package without importing it: importing pyspark is not needed to read a path.
    from importlib.util import find_spec

    try:
        spec = find_spec("pyspark")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _pyspark_version() -> str | None:
    try:
        import pyspark
    except ImportError:
        return None
    version = getattr(pyspark, "__version__", None)
    return str(version) if version else None


def _major_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"^\s*(\d+)\.(\d+)", version or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


# ---------------------------------------------------------------- detection from a running JVM


def running_versions(jvm: Any) -> tuple[str, str]:
    """``(spark_version, scala_binary_version)`` of a running driver JVM, asked through py4j.

    ``jvm`` is a py4j JVM view (``SparkContext._jvm``, ``spark.sparkContext._jvm``). The classes on the JVM's
    classpath are what the bridge must link against, so this beats anything read from files. Both calls are
    static forwarders of Scala objects that every Spark and Scala version has: ``org.apache.spark.package``
    (the ``SPARK_VERSION`` of Spark's package object) and ``scala.util.Properties``.
    """
    spark_version = str(jvm.org.apache.spark.package.SPARK_VERSION())
    scala_full = str(jvm.scala.util.Properties.versionNumberString())
    scala = scala_binary_version(scala_full)
    if scala is None:
        raise BridgeJarNotFoundError(f"the driver JVM reports Scala version {scala_full!r}, which is not one")
    return spark_version, scala


def bridge_jar(jvm: Any | None = None, jars_dir: Path | None = None) -> Path:
    """The bridge jar for this process's Spark: asked from ``jvm`` when a driver JVM already runs (pass
    ``SparkContext._jvm``; None when there is none), otherwise read from the installed files."""
    spark_version, scala = running_versions(jvm) if jvm is not None else installed_versions()
    return jar_path(spark_version, scala, jars_dir)
