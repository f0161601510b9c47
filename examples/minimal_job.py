"""The smallest real use: one line added to an ordinary Structured Streaming job.

    spark-submit --master spark://host:7077 --conf spark.dynamicAllocation.enabled=false \
        --conf spark.sparkscale.maxExecutors=8 examples/minimal_job.py

No `--jars` and no `--conf spark.plugins`: the one line adds the bridge itself. The master comes
from spark-submit (or, for a plain `python examples/minimal_job.py`, from SPARK_MASTER; without
it pyspark runs `local[*]`, which cannot add executors, and the autoscaler only recommends).
Kafka, files, Delta or any source that reports its backlog in the progress events works the same
way.
"""

import os

from pyspark.sql import SparkSession

from sparkscale_listener import autoscale, autoscaler

builder = SparkSession.builder.appName("minimal-job")
if "SPARK_MASTER" in os.environ:  # never override spark-submit's --master
    builder = builder.master(os.environ["SPARK_MASTER"])
spark = autoscale(builder)

query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
         .writeStream.format("noop").start())
try:
    query.awaitTermination(timeout=int(os.environ.get("RUN_SECONDS", "30")))
    print(autoscaler(spark).status())
finally:
    query.stop()
    spark.stop()
