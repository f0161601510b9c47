"""A complete Kafka job under sparkscale: read a topic, enrich each record, write JSON files
exactly once, with the executors sized by the autoscaler from the topic's lag.

    python examples/kafka_job.py --bootstrap-servers broker1:9092 --topic orders \\
        --output /data/orders-enriched --checkpoint /data/checkpoints/orders-enriched

Spark's Kafka connector is not part of Spark. By default this job names the one that matches the
Spark it runs on (``org.apache.spark:spark-sql-kafka-0-10_<scala>:<spark version>``) in
``spark.jars.packages``, and Spark fetches it and its dependencies from Maven Central when the
driver starts. On a cluster without internet access, resolve those jars once and pass them with
``--connector-jars DIR`` (every ``*.jar`` in DIR goes into ``spark.jars``). Under ``spark-submit``
the driver is already running when this code starts, so give the connector to spark-submit itself
(``--packages`` or ``--jars``).

Why ``maxOffsetsPerTrigger``: without a read limit every micro-batch reads all that is waiting,
so the lag shows only as ever longer batches. With one, the lag stays in Kafka where the progress
reports it, and the autoscaler sizes the executors to work it off within ``catchUpDuration``.
Each Kafka partition is one task per batch: a topic of 8 partitions keeps at most 8 task slots
busy, and the autoscaler asks for no more than that.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, udf
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StringType

from sparkscale_listener import autoscale
from sparkscale_listener.spark.jars import installed_versions

# Executors the autoscaler may use, and how fast it reacts; see docs/configuration.md.
AUTOSCALER_CONF: dict[str, str] = {
    "spark.sparkscale.minExecutors": "1",
    "spark.sparkscale.maxExecutors": "8",
    "spark.sparkscale.catchUpDuration": "5min",
}


def kafka_connector_package(spark_version: str | None = None, scala_version: str | None = None) -> str:
    """Maven coordinates of Spark's Kafka connector for this Spark (the installed one by default)."""
    if spark_version is None or scala_version is None:
        installed_spark, installed_scala = installed_versions()
        spark_version = spark_version or installed_spark
        scala_version = scala_version or installed_scala
    return f"org.apache.spark:spark-sql-kafka-0-10_{scala_version}:{spark_version}"


def build_session(app_name: str, connector_jars: Sequence[str | Path] = (), package: str | None = None,
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """The session, with the connector on the classpath and the autoscaler started (one line).

    ``connector_jars``: jar files to put in ``spark.jars``; when empty, ``package`` (default: the
    matching connector) goes into ``spark.jars.packages``.
    """
    builder = SparkSession.builder.appName(app_name)
    if connector_jars:
        builder = builder.config("spark.jars", ",".join(str(Path(j).resolve()) for j in connector_jars))
    else:
        builder = builder.config("spark.jars.packages", package or kafka_connector_package())
    for key, value in {**AUTOSCALER_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return autoscale(builder)


def read_topic(spark: SparkSession, bootstrap_servers: str, topic: str, max_offsets_per_trigger: int,
               starting_offsets: str = "earliest", options: Mapping[str, str] | None = None) -> DataFrame:
    """The topic as a stream of (key, value, topic, partition, offset) with string key and value.

    ``options`` are more reader options, e.g. ``kafka.security.protocol`` or ``failOnDataLoss``.
    """
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("subscribe", topic)
              .option("startingOffsets", starting_offsets)
              .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger)))
    for key, value in (options or {}).items():
        reader = reader.option(key, value)
    return reader.load().select(col("key").cast("string").alias("key"),
                                col("value").cast("string").alias("value"),
                                "topic", "partition", "offset")


def enrich(frame: DataFrame, seconds_per_record: float = 0.0) -> DataFrame:
    """Per-record work. Replace the body of ``lookup`` with yours (a call to a service, a model);
    ``seconds_per_record`` stands in for its latency, so the job can be tried with a real load."""

    @udf(returnType=StringType(), useArrow=False)  # one record at a time, on every Spark line
    def lookup(value: str | None) -> str | None:
        if seconds_per_record > 0:
            time.sleep(seconds_per_record)
        return None if value is None else f"enriched:{value}"

    return frame.withColumn("enriched", lookup(col("value")))


def start_query(frame: DataFrame, output: str | Path, checkpoint: str | Path, name: str = "kafka-enrich",
                trigger: str = "10 seconds") -> StreamingQuery:
    """Write JSON files; the checkpoint and the file sink's log make every record land once."""
    return (frame.writeStream.format("json").queryName(name)
            .option("path", str(output))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime=trigger)
            .start())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="directory of the JSON file sink")
    parser.add_argument("--checkpoint", required=True, help="checkpoint directory (keep it across restarts)")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=10_000)
    parser.add_argument("--trigger", default="10 seconds")
    parser.add_argument("--seconds-per-record", type=float, default=0.0,
                        help="simulated latency of the per-record work")
    parser.add_argument("--connector-jars", type=Path, default=None,
                        help="a directory of the Kafka connector's jars, instead of spark.jars.packages")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="more Spark settings, e.g. spark.sparkscale.maxExecutors=20")
    args = parser.parse_args(argv)

    conf: dict[str, Any] = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--conf {item!r}: expected KEY=VALUE")
        conf[key] = value
    jars = sorted(args.connector_jars.glob("*.jar")) if args.connector_jars else []
    if args.connector_jars and not jars:
        parser.error(f"--connector-jars {args.connector_jars}: no .jar files there")
    spark = build_session(f"kafka-enrich-{args.topic}", connector_jars=jars, conf=conf)
    stream = read_topic(spark, args.bootstrap_servers, args.topic, args.max_offsets_per_trigger)
    query = start_query(enrich(stream, args.seconds_per_record), args.output, args.checkpoint,
                        trigger=args.trigger)
    query.awaitTermination()  # raises the query's own error (broker gone, topic deleted, ...)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
