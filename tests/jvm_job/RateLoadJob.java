import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeoutException;

import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.StreamingQueryException;
import org.apache.spark.sql.streaming.Trigger;

/**
 * A streaming job of the JVM's own, for the test of the agent beside a JVM driver (tests/integration/
 * test_server_side_launch.py): no Python in it, the autoscaler enabled by spark-submit's confs alone. A load phase (a
 * rate source whose rows each wait a while on an executor, into Parquet), until the file {@code quiet} appears in the
 * control directory; then a quiet phase (a few rows a second) until {@code end} appears. It then counts what the load
 * phase wrote and prints it ("rows=N distinct=D min=A max=B"): exactly once is every value once, 0 to N-1.
 *
 * <p>Arguments: the control directory, the output directory, the load's rows per second, each row's wait in ms.
 */
public final class RateLoadJob {
  private RateLoadJob() {
  }

  public static void main(String[] args) throws Exception {
    Path control = Path.of(args[0]);
    String output = args[1];
    int rowsPerSecond = Integer.parseInt(args[2]);
    long waitMs = Long.parseLong(args[3]);
    SparkSession spark = SparkSession.builder().appName("jvm-rate-load").getOrCreate();
    MapFunction<Row, Long> work = row -> {
      Thread.sleep(waitMs); // a row's work: a wait, not CPU, so that 2 cores can run 3 executors
      return row.getLong(1);
    };
    StreamingQuery load = spark.readStream().format("rate").option("rowsPerSecond", rowsPerSecond)
        .option("numPartitions", 3).load()
        .map(work, Encoders.LONG())
        .writeStream().queryName("jvm-load").format("parquet")
        .option("path", output + "/load").option("checkpointLocation", output + "/load-checkpoint")
        .trigger(Trigger.ProcessingTime("1 second")).start();
    runUntil(load, control.resolve("quiet"));
    StreamingQuery quiet = spark.readStream().format("rate").option("rowsPerSecond", 2)
        .option("numPartitions", 1).load()
        .writeStream().queryName("jvm-quiet").format("noop")
        .trigger(Trigger.ProcessingTime("1 second")).start();
    runUntil(quiet, control.resolve("end"));
    Row counts = spark.read().parquet(output + "/load")
        .selectExpr("count(*)", "count(DISTINCT value)", "min(value)", "max(value)").head();
    System.out.printf("rows=%d distinct=%d min=%d max=%d%n", counts.getLong(0), counts.getLong(1),
        counts.isNullAt(2) ? -1 : counts.getLong(2), counts.isNullAt(3) ? -1 : counts.getLong(3));
    spark.stop();
  }

  private static void runUntil(StreamingQuery query, Path signal)
      throws StreamingQueryException, TimeoutException {
    while (!Files.exists(signal)) {
      if (query.awaitTermination(500)) {
        throw new IllegalStateException("the query " + query.name() + " ended on its own");
      }
    }
    query.stop();
  }
}
