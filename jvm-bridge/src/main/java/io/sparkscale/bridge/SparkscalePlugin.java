package io.sparkscale.bridge;

import java.util.Collections;
import java.util.Map;

import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;
import org.slf4j.LoggerFactory;

/**
 * Entry point enabled with {@code spark.plugins=io.sparkscale.bridge.SparkscalePlugin} (and the jar in
 * {@code spark.jars}). Being a plugin, its listener is attached before the task scheduler starts, so it sees the
 * very first executors; a listener added later from Python would miss them.
 */
public class SparkscalePlugin implements SparkPlugin {

  /** The name of the dedicated listener-bus queue (capacity: spark.scheduler.listenerbus.eventqueue.sparkscale.capacity). */
  public static final String QUEUE = "sparkscale";

  @Override
  public DriverPlugin driverPlugin() {
    return new Driver();
  }

  /** Nothing runs on executors; Spark's plugin container skips a null executor plugin. */
  @Override
  public ExecutorPlugin executorPlugin() {
    return null;
  }

  static final class Driver implements DriverPlugin {
    private SparkContext sc;
    private AgentProcess agent;

    @Override
    public Map<String, String> init(SparkContext sc, PluginContext ctx) {
      // The task scheduler does not exist yet: only wire things up here, never call into scheduling.
      this.sc = sc;
      if (AgentProcess.wanted(sc.conf())) {
        // A refused configuration stops the driver now, before any executor starts, as it stops the in-job launch.
        AgentProcess.checkConfiguration(sc.conf());
      }
      SparkscaleListener listener = new SparkscaleListener(sc.conf());
      // Own queue: a slow snapshot never delays Spark's queues, and a busy app never delays ours.
      sc.listenerBus().addToQueue(listener, QUEUE);
      QueryEvents queryEvents = new QueryEvents();
      sc.listenerBus().addToQueue(queryEvents, QUEUE);
      SparkscaleBridge.install(sc, listener, queryEvents, ctx.metricRegistry());
      return Collections.emptyMap();
    }

    /** The last step of the SparkContext's start: the agent attaches to a context that runs. */
    @Override
    public void registerMetrics(String appId, PluginContext ctx) {
      if (AgentProcess.wanted(sc.conf())) {
        try {
          agent = AgentProcess.start(sc);
        } catch (RuntimeException | LinkageError e) {
          // The application runs on without its autoscaler rather than not at all.
          LoggerFactory.getLogger("sparkscale").error("could not start the autoscaler's process", e);
        }
      }
    }

    @Override
    public void shutdown() {
      if (agent != null) {
        agent.stop();
      }
      SparkscaleBridge.uninstall(sc);
    }
  }
}
