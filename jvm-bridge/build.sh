#!/usr/bin/env bash
# Builds the sparkscale JVM bridge jar against the Spark jars shipped with pyspark (no Maven needed).
# Usage: jvm-bridge/build.sh <pyspark-jars-dir> <output-jar>
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 <pyspark-jars-dir> <output-jar>" >&2
  exit 2
fi
jars_dir=$1
out_jar=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

for tool in javac jar; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "error: '$tool' not found on PATH; install a JDK 17+ (javac and jar) to build the sparkscale bridge" >&2
    exit 1
  fi
done
if ! ls "$jars_dir"/spark-core_*.jar >/dev/null 2>&1; then
  echo "error: no spark-core jar in '$jars_dir'; pass pyspark's jars directory (.../site-packages/pyspark/jars)" >&2
  exit 1
fi

classes="$here/build/classes"
rm -rf "$classes"
mkdir -p "$classes" "$(dirname "$out_jar")"
# The classpath wildcard must reach javac unexpanded by the shell.
javac --release 17 -encoding UTF-8 -Xlint:unchecked -cp "$jars_dir/*" -d "$classes" \
  $(find "$here/src/main/java" -name '*.java' | sort)
jar --create --file "$out_jar" -C "$classes" .
echo "built $out_jar"
