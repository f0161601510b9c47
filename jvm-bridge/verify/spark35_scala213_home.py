"""Assembles a Spark 3.5 / Scala 2.13 SPARK_HOME from Maven Central, to run the spark3.5_2.13 jar for real.

pip's pyspark 3.5 is Scala 2.12 only, and the Scala 2.13 distribution is not on PyPI or Maven Central. This
builds an equivalent: spark-core_2.13 and spark-sql_2.13 with their dependencies (Maven), the non-Scala jars
aligned to the versions the pyspark 3.5 package ships (Maven's nearest-wins resolution picks some older ones,
e.g. a jackson-core without StreamReadConstraints), and pyspark's own bin/, sbin/ and python/ linked in.

    $VENV35/bin/python jvm-bridge/verify/spark35_scala213_home.py /tmp/spark-3.5-scala2.13
    SPARK_HOME=/tmp/spark-3.5-scala2.13 $VENV35/bin/python jvm-bridge/verify/verify_spark_line.py

($VENV35: a virtualenv with pyspark 3.5.x.)

Needs mvn; downloads ~150 MB into a local repository next to the output (not ~/.m2).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>scratch</groupId><artifactId>spark-scala213-runtime</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-core_2.13</artifactId>
      <version>{v}</version></dependency>
    <dependency><groupId>org.apache.spark</groupId><artifactId>spark-sql_2.13</artifactId>
      <version>{v}</version></dependency>
  </dependencies>
</project>
"""
_JAR = re.compile(r"^(?P<artifact>.*?)-(?P<version>\d[\w.\-]*)\.jar$")


def artifact(path: Path) -> tuple[str, str]:
    match = _JAR.match(path.name)
    return (match.group("artifact"), match.group("version")) if match else (path.name, "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the SPARK_HOME to create")
    args = parser.parse_args()
    import pyspark

    version = pyspark.__version__
    if not version.startswith("3.5."):
        sys.exit(f"run this with the Python of a pyspark 3.5 environment (this one has pyspark {version})")
    package = Path(pyspark.__file__).parent
    out = args.out.resolve()
    jars = out / "jars"
    if jars.exists():
        shutil.rmtree(jars)
    jars.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "pom.xml").write_text(POM.format(v=version))
        subprocess.run(["mvn", "-B", "-q", "-Dstyle.color=never", "dependency:copy-dependencies",
                        f"-DoutputDirectory={jars}", f"-Dmaven.repo.local={out.parent / (out.name + '-m2')}"],
                       cwd=tmp, check=True)
    shipped = {artifact(p)[0]: p for p in (package / "jars").glob("*.jar")}
    for jar in sorted(jars.glob("*.jar")):
        name, jar_version = artifact(jar)
        if "_2.1" in name or name.startswith("scala-") or "native" in name:
            continue  # Scala-versioned, or a platform variant: keep Maven's
        own = shipped.get(name)
        if own is not None and artifact(own)[1] != jar_version:
            print(f"aligned {jar.name} -> {own.name}")
            jar.unlink()
            shutil.copy2(own, jars / own.name)
    for part in ("bin", "sbin", "python"):
        link = out / part
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(package / part)
    print(f"SPARK_HOME={out}: Spark {version}, Scala 2.13 ({len(list(jars.glob('*.jar')))} jars)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
