package io.sparkscale.bridge;

import java.util.Map;

import com.codahale.metrics.MetricRegistry;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.ExecutorAllocationClient;
import org.apache.spark.SparkContext;
import org.apache.spark.scheduler.ExecutorDecommissionInfo;
import org.apache.spark.scheduler.SchedulerBackend;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Option;
import scala.Tuple2;

/**
 * Static entry points for Python (py4j). Everything is safe to call when the plugin is not installed or the
 * SparkContext has stopped: queries answer false / "{}" / empty, actions do nothing. Errors raised by Spark itself
 * (for example killExecutors while dynamic allocation is on) are not swallowed: they reach Python as Py4JJavaError.
 */
public final class SparkscaleBridge {
  /** Gauges registered at init; others are registered when first set. */
  public static final String[] DEFAULT_GAUGES = {
      "targetExecutors", "liveExecutors", "pendingExecutors", "utilization", "paused", "backlog"};

  private static final Logger LOG = LoggerFactory.getLogger(SparkscaleBridge.class);
  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static final String[] NONE = new String[0];

  private static volatile SparkContext sc;
  private static volatile SparkscaleListener listener;
  private static volatile AutoscalerTab tab;
  private static volatile MetricsEndpoint metricsEndpoint;
  private static volatile SourceOffsets sourceOffsets;
  private static volatile IdleRemovals idleRemovals;
  private static volatile QueryEvents queryEvents;
  // The agent's in-memory state store, kept here, in the driver's heap: an agent restarted after a crash takes over
  // the last healthy size, a pause and the scale-down wait instead of starting afresh (and asking for its initial
  // executors under load). It ends with the application, as the in-job launch's memory store does.
  private static volatile String agentState;

  private SparkscaleBridge() {
  }

  // ---------------------------------------------------------------- lifecycle (called by the plugin)

  static synchronized void install(SparkContext context, SparkscaleListener l, QueryEvents events,
                                   MetricRegistry metrics) {
    sc = context;
    listener = l;
    queryEvents = events;
    agentState = null;
    l.countDroppedEventsWith(() -> SparkContextViews.droppedListenerEvents(context));
    SourceOffsets offsets = new SourceOffsets();
    sourceOffsets = offsets;
    l.readSourceOffsetsWith(offsets::readings);
    l.listExecutorsWith(() -> SparkContextViews.listedExecutors(context));
    l.listActiveStagesWith(() -> SparkContextViews.activeStages(context));
    IdleRemovals removals = new IdleRemovals(ids -> killIdle(ids, false), l::liveExecutorsExcept, l::live);
    idleRemovals = removals;
    l.reportIdleExecutorsTo(removals::executorIdle);
    Gauges.install(metrics, DEFAULT_GAUGES);
    try {
      tab = AutoscalerTab.attachTo(context);
    } catch (RuntimeException | LinkageError e) {
      // The tab is a convenience: a UI that cannot take it must not stop the application or the autoscaler.
      tab = null;
      LOG.warn("could not attach the Autoscaler UI tab: {}", e.toString());
    }
    try {
      metricsEndpoint = tab == null ? null : MetricsEndpoint.attachTo(tab.ui());
    } catch (RuntimeException | LinkageError e) {
      // As for the tab: Spark's metrics system still has the gauges.
      metricsEndpoint = null;
      LOG.warn("could not attach the autoscaler's Prometheus endpoint {}: {}", MetricsEndpoint.PATH, e.toString());
    }
  }

  static synchronized void uninstall(SparkContext context) {
    if (sc == context) {
      AutoscalerTab t = tab;
      MetricsEndpoint m = metricsEndpoint;
      tab = null;
      metricsEndpoint = null;
      try {
        if (m != null) {
          m.detach();
        }
        if (t != null) {
          t.detach();
        }
      } catch (RuntimeException e) {
        // The UI is being stopped with the context anyway.
      }
      SourceOffsets offsets = sourceOffsets;
      sourceOffsets = null;
      if (offsets != null) {
        offsets.close();
      }
      IdleRemovals removals = idleRemovals;
      idleRemovals = null;
      if (removals != null) {
        removals.close();
      }
      sc = null;
      listener = null;
      queryEvents = null;
      agentState = null;
      Gauges.uninstall();
    }
  }

  /**
   * Replies to Python without the 44 ms that py4j's sockets add to every reply over 8 KB (see {@link Py4jReplies});
   * {@code gatewayServer} is Python's {@code gateway.java_gateway_server}. Returns the connections set now.
   */
  public static int repliesWithoutDelay(Object gatewayServer) {
    return Py4jReplies.withoutDelay(gatewayServer);
  }

  // ---------------------------------------------------------------- the agent's state

  /** What the agent's in-memory state store saved last (its JSON), or null: nothing yet in this application. */
  public static String agentState() {
    return agentState;
  }

  /** Keeps the agent's in-memory state store (its JSON) until the application ends or the agent saves it again. */
  public static void saveAgentState(String json) {
    agentState = json;
  }

  // ---------------------------------------------------------------- queries

  public static boolean isInstalled() {
    SparkContext c = sc;
    return c != null && listener != null && !c.isStopped();
  }

  /** The listener's counters as one JSON object (declared in snapshot-schema.json), "{}" when not installed. */
  public static String snapshotJson() {
    return snapshotJson(-1);
  }

  /**
   * {@link #snapshotJson()} with only the micro-batches that changed after change count {@code batchesSince} (the
   * {@code changes} of an earlier snapshot; -1: all of them). At 100 queries the 64 batches each are most of the
   * JSON, and a poll a second sees a few of them change.
   */
  public static String snapshotJson(long batchesSince) {
    SparkscaleListener l = listener;
    SparkContext c = sc;
    if (l == null || c == null) {
      return "{}";
    }
    l.forgetOtherStages(jobId -> SparkContextViews.jobStatus(c, jobId), System.currentTimeMillis());
    return toJson(l.snapshotNow(c.applicationId(), batchesSince));
  }

  /** The streaming queries' events of every SparkSession after number {@code seen}, as {@link QueryEvents#after}. */
  public static String queryEventsJson(long seen, long waitMs) throws InterruptedException {
    QueryEvents events = queryEvents;
    return events == null ? "{}" : toJson(events.after(seen, waitMs));
  }

  /** The application's SparkContext while it runs, else null: the agent ({@link AgentProcess}) attaches to it. */
  public static SparkContext sparkContext() {
    return activeContext();
  }

  /**
   * Reads the latest offsets of the query's Kafka sources every second from now on, for the snapshots'
   * {@code sourceOffsets} (see {@link SourceOffsets}); {@code streamingQuery} is the JVM query (pyspark's
   * {@code query._jsq}). Nothing happens when the plugin is not installed.
   */
  public static void watchSourceOffsets(String queryId, Object streamingQuery) {
    SourceOffsets offsets = sourceOffsets;
    if (offsets != null && streamingQuery != null) {
      offsets.watch(queryId, streamingQuery);
    }
  }

  static String toJson(Map<String, Object> snapshot) {
    try {
      return MAPPER.writeValueAsString(snapshot);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException("cannot serialize the sparkscale snapshot", e);
    }
  }

  /** True when the Autoscaler tab is attached to the driver UI (false with spark.ui.enabled=false). */
  public static boolean uiTabAttached() {
    return tab != null;
  }

  /** True when {@code /autoscaler/metrics} is served (with the tab). */
  public static boolean metricsEndpointAttached() {
    return metricsEndpoint != null;
  }

  /** The latest Prometheus text given to {@link #publishGauges} ("" before the first). */
  public static String latestMetrics() {
    return Gauges.text();
  }

  /**
   * The live Autoscaler tab's document as JSON (what the page renders; schema in autoscaler-tab.schema.json), or
   * null without a tab or before the first autoscaler event. For tests and diagnostics.
   */
  public static String tabDocument() {
    AutoscalerTab t = tab;
    return t == null ? null : t.content().json();
  }

  // ---------------------------------------------------------------- actions

  /**
   * A tick's gauges in one call (a py4j round trip per gauge cost a tick 60 ms at 100 queries): {@code valuesJson}, an
   * object of gauge names and values, sets them (a name seen for the first time, e.g. "query.orders.backlogRows", gets
   * its gauge registered); {@code removedJson}, an array of names, unregisters those (a stopped query's: they leave
   * every metrics sink); {@code text} is the Prometheus text the endpoint serves (rendered in
   * sparkscale_listener/observe/gauges.py).
   */
  public static void publishGauges(String valuesJson, String removedJson, String text) {
    Gauges.publish(valuesJson, removedJson, text);
  }

  /**
   * An absolute executor target, never a delta: the cluster manager keeps the last target it was given, and a kill
   * before any request would leave it a target of zero, so no lost executor would ever be replaced.
   */
  public static boolean requestTotalExecutors(int total) {
    SparkContext c = activeContext();
    if (c == null) {
      return false;
    }
    scala.collection.immutable.Map<String, Object> noHosts = scala.collection.immutable.Map$.MODULE$.empty();
    return c.requestTotalExecutors(total, 0, noHosts);
  }

  /** Kills (and does not replace) these executors; returns them all when Spark accepted the request, else none. */
  public static String[] killExecutors(String[] ids) {
    SparkContext c = activeContext();
    if (c == null || ids == null || ids.length == 0) {
      return NONE;
    }
    boolean ok = c.killExecutors(ScalaSeqs.scalaList(ids));
    return ok ? ids.clone() : NONE;
  }

  /**
   * Kills these executors unless they are busy: an executor that started a task since Python looked is skipped by the
   * scheduler itself (force=false), and one holding shuffle output of a running job is skipped here (its loss would
   * fail the job's next stage with FetchFailed). Returns the ids killed; the target is lowered by one for each.
   */
  public static String[] killIdleExecutors(String[] ids) {
    return killIdle(ids, true);
  }

  /**
   * Removes these busy executors the moment their running tasks end (see {@link IdleRemovals}), replacing the ones
   * named before (none cancels), while more than {@code target} executors are live. The target is not lowered: the
   * autoscaler has set it already.
   */
  public static void removeWhenIdle(String[] ids, int target) {
    IdleRemovals removals = idleRemovals;
    SparkscaleListener l = listener;
    if (removals != null && l != null) {
      removals.want(ids, target, l::idle);
    }
  }

  /** The executors {@link #removeWhenIdle} removed since the last call. */
  public static String[] removedWhenIdle() {
    IdleRemovals removals = idleRemovals;
    return removals == null ? NONE : removals.takeRemoved();
  }

  private static String[] killIdle(String[] ids, boolean adjustTarget) {
    SparkContext c = activeContext();
    if (c == null || ids == null || ids.length == 0 || !(c.schedulerBackend() instanceof ExecutorAllocationClient)) {
      return NONE;
    }
    String[] free = withoutShuffleHolders(c, ids);
    if (free.length == 0) {
      return NONE;
    }
    // (ids, adjustTargetNumExecutors, countFailures, force)
    scala.collection.Seq<String> killed = ((ExecutorAllocationClient) c.schedulerBackend())
        .killExecutors(ScalaSeqs.scalaList(free), adjustTarget, false, false);
    return ScalaSeqs.toArray(killed);
  }

  /** Executors holding shuffle output of a running job (see {@link #killIdleExecutors}); none without the plugin. */
  public static String[] shuffleHolders() {
    SparkContext c = activeContext();
    SparkscaleListener l = listener;
    if (c == null || l == null) {
      return NONE;
    }
    return runningJobsShuffleHolders(c, l).toArray(NONE);
  }

  private static java.util.Set<String> runningJobsShuffleHolders(SparkContext c, SparkscaleListener l) {
    return l.shuffleHolders(jobId -> SparkContextViews.jobStatus(c, jobId), System.currentTimeMillis());
  }

  private static String[] withoutShuffleHolders(SparkContext c, String[] ids) {
    SparkscaleListener l = listener;
    if (l == null) {
      return ids.clone();
    }
    java.util.Set<String> holders = runningJobsShuffleHolders(c, l);
    return java.util.Arrays.stream(ids).filter(id -> !holders.contains(id)).toArray(String[]::new);
  }

  /**
   * Graceful decommission; returns the ids Spark accepted. Needs spark.decommission.enabled=true: without it the
   * driver still marks the executors as decommissioning (no more tasks) while the executors ignore the request,
   * leaving idle zombies, so this refuses (returns none) instead. The target is not lowered here: the autoscaler
   * sets absolute targets itself.
   */
  public static String[] decommissionExecutors(String[] ids) {
    SparkContext c = activeContext();
    if (c == null || ids == null || ids.length == 0 || !c.conf().getBoolean("spark.decommission.enabled", false)) {
      return NONE;
    }
    SchedulerBackend backend = c.schedulerBackend();
    if (!(backend instanceof ExecutorAllocationClient)) {
      return NONE;
    }
    // With shuffle-block migration the executor hands its shuffle output to others before it leaves; without it,
    // output a running job still needs would be lost as with a kill.
    boolean migrates = c.conf().getBoolean("spark.storage.decommission.enabled", false)
        && c.conf().getBoolean("spark.storage.decommission.shuffleBlocks.enabled", true);
    String[] chosen = migrates ? ids : withoutShuffleHolders(c, ids);
    if (chosen.length == 0) {
      return NONE;
    }
    ExecutorDecommissionInfo info = new ExecutorDecommissionInfo("decommissioned by sparkscale", Option.empty());
    @SuppressWarnings("unchecked")
    Tuple2<String, ExecutorDecommissionInfo>[] pairs = new Tuple2[chosen.length];
    for (int i = 0; i < chosen.length; i++) {
      pairs[i] = new Tuple2<>(chosen[i], info);
    }
    // scala.collection.Seq: what Scala 2.12 builds return, and a supertype of 2.13's immutable.Seq.
    return ScalaSeqs.toArray(((ExecutorAllocationClient) backend).decommissionExecutors(pairs, false, false));
  }

  public static void postScalingEvent(String action, int fromExecutors, int toExecutors, String reason,
                                      boolean applied, String mode, String detailsJson) {
    SparkContext c = activeContext();
    if (c == null) {
      return;
    }
    c.listenerBus().post(new ScalingEvent(action, fromExecutors, toExecutors, reason, applied, mode,
        EventJson.details(detailsJson), System.currentTimeMillis()));
  }

  public static void postAutoscalerEvent(String kind, String severity, String reason, String detailsJson) {
    SparkContext c = activeContext();
    if (c == null) {
      return;
    }
    c.listenerBus().post(new AutoscalerEvent(kind, severity, reason, EventJson.details(detailsJson),
        System.currentTimeMillis()));
  }

  /**
   * Posts a tick summary (an {@link AutoscalerTick}); {@code json} is one object with the parts "point", "decision",
   * "status", "queries" and "config" ({@code $defs/tick} in autoscaler-tab.schema.json). {@code logged}: the event
   * log keeps it; otherwise only the live tab sees it (and any listener on the bus).
   */
  public static void postTickEvent(String json, boolean logged) {
    SparkContext c = activeContext();
    if (c == null) {
      return;
    }
    Map<String, Object> parts = EventJson.details(json);
    c.listenerBus().post(new AutoscalerTick(EventJson.object(parts.get("point")),
        EventJson.object(parts.get("decision")), EventJson.object(parts.get("status")),
        EventJson.list(parts.get("queries")), EventJson.object(parts.get("config")),
        System.currentTimeMillis(), !logged));
  }

  // ---------------------------------------------------------------- helpers

  private static SparkContext activeContext() {
    SparkContext c = sc;
    return c != null && !c.isStopped() ? c : null;
  }
}
