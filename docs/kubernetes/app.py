"""A stand-in streaming application for the SparkApplication manifests beside it: put yours in its place
(the Dockerfile copies it to /opt/spark/work-dir/app.py).

The one line is ``autoscale(SparkSession.builder)``; every setting comes from the manifest's sparkConf,
the application's name included: sparkscale keeps its state in the ConfigMap ``sparkscale-<app name>``,
so a restarted driver finds it only under the same name, and both operators set it from the
SparkApplication's.
"""

from pyspark.sql import SparkSession

from sparkscale_listener import autoscale

spark = autoscale(SparkSession.builder)

# Spark's rate source with a little work per row; any source that reports its backlog (Kafka, files,
# Delta) is sized the same way.
rows = spark.readStream.format("rate").option("rowsPerSecond", 2000).load()
(rows.selectExpr("value % 100 AS key", "sha2(CAST(value AS STRING), 256) AS digest")
 .writeStream.format("noop").trigger(processingTime="5 seconds").start())
spark.streams.awaitAnyTermination()
