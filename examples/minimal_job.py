"""The smallest real use: one line added to an ordinary Structured Streaming job.

    spark-submit --master spark://host:7077 --conf spark.dynamicAllocation.enabled=false \
        --conf spark.sparkscale.maxExecutors=8 examples/minimal_job.py

(or plain `python examples/minimal_job.py` with SPARK_MASTER set). Kafka, files, Delta or any
source that reports its backlog in the progress events works the same way.
"""

import os

from pyspark.sql import SparkSession

from sparkscale_listener import autoscale, autoscaler

spark = autoscale(SparkSession.builder.appName("minimal-job")
                  .master(os.environ.get("SPARK_MASTER", "local-cluster[2,1,1024]")))

query = (spark.readStream.format("rate").option("rowsPerSecond", 100).load()
         .writeStream.format("noop").start())
try:
    query.awaitTermination(timeout=int(os.environ.get("RUN_SECONDS", "30")))
    print(autoscaler(spark).status())
finally:
    query.stop()
    spark.stop()
