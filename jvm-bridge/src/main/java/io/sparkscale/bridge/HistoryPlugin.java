package io.sparkscale.bridge;

import org.apache.spark.SparkConf;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.status.AppHistoryServerPlugin;
import org.apache.spark.status.ElementTrackingStore;
import org.apache.spark.ui.SparkUI;
import org.apache.spark.util.kvstore.KVStore;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.collection.immutable.List;
import scala.collection.immutable.List$;

/**
 * The Autoscaler tab in the Spark History Server. Registered through ServiceLoader
 * ({@code META-INF/services/org.apache.spark.status.AppHistoryServerPlugin}), so the bridge jar on the History
 * Server's classpath ({@code SPARK_DAEMON_CLASSPATH}, or its {@code jars/} directory) is all it takes: the same jar
 * also lets the History Server read the autoscaler's events, which it otherwise drops as unrecognized.
 *
 * <p>Spark's SQL tab works the same way: a listener fills the application's store during the replay
 * ({@link HistoryListener}), and {@link #setupUI} adds the tab, only to applications that have autoscaler events.
 */
public final class HistoryPlugin implements AppHistoryServerPlugin {
  private static final Logger LOG = LoggerFactory.getLogger(HistoryPlugin.class);

  /** A Scala List: a {@code scala.collection.Seq} (Scala 2.12) and an {@code immutable.Seq} (2.13) alike. */
  @Override
  public List<SparkListener> createListeners(SparkConf conf, ElementTrackingStore store) {
    List<SparkListener> none = List$.MODULE$.empty();
    return none.<SparkListener>$colon$colon(new HistoryListener(store));
  }

  @Override
  public void setupUI(SparkUI ui) {
    try {
      KVStore store = ui.store().store();
      if (store.count(HistoryRecord.class) > 0) {
        AutoscalerTab.attachToHistory(ui, new HistoryDocument(store));
      }
    } catch (Exception | LinkageError e) {
      // The application's other pages must not suffer for the tab.
      LOG.warn("sparkscale: could not add the Autoscaler tab to the History Server: {}", e.toString());
    }
  }
}
