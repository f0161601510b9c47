package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.annotation.JsonInclude;

import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * One control tick, summarized: what the Autoscaler tab's chart, summary and queries table need. Python posts one
 * every tick while the driver has a UI (the live tab's {@link TabDocument} is fed from the listener bus), and only
 * some of them go to the event log, where the History Server rebuilds the same tab from them: the first, every one
 * that changed the executors or the pause state, and otherwise one per {@code spark.sparkscale.events.tickInterval}
 * (Python's {@code TickSummaries} decides). The others are {@link #liveOnly}: {@link #logEvent} keeps them out of the
 * event log, which so grows by about 1 MB a day whatever the control interval. The fields are declared in
 * {@code autoscaler-tab.schema.json} ({@code $defs/tick}) beside the page's script. Same event-log conventions as
 * {@link ScalingEvent}.
 *
 * @param point    the chart's point: t, live, target, rates, backlog, utilization
 * @param decision the decisions to do nothing since the previous logged tick: how many, the first and latest time,
 *                 the latest reason
 * @param status   mode, pause state and reason, pending executors, provisioning time, errors, blocked queries
 * @param queries  per query: name, backlog, rates, utilization, required slots, notes (the queries table)
 * @param config   the settings the tab shows (interval, executor limits, utilization target and maximum); first
 *                 tick only
 * @param liveOnly true for a tick the event log does not keep (never written, so never read back: false there)
 */
public record AutoscalerTick(Map<String, Object> point, Map<String, Object> decision, Map<String, Object> status,
                             List<Map<String, Object>> queries, Map<String, Object> config, long timestampMs,
                             @JsonInclude(JsonInclude.Include.NON_DEFAULT) boolean liveOnly)
    implements SparkListenerEvent {

  /** Missing parts are empty objects, so a reader never meets null. */
  public AutoscalerTick {
    point = point == null ? new LinkedHashMap<>() : point;
    decision = decision == null ? new LinkedHashMap<>() : decision;
    status = status == null ? new LinkedHashMap<>() : status;
    queries = queries == null ? new ArrayList<>() : queries;
    config = config == null ? new LinkedHashMap<>() : config;
  }

  /**
   * Spark's EventLoggingListener writes an event only when this is true (Scala's {@code protected[spark]} is public
   * in bytecode; Spark 3.5 and 4.x call it the same way). Jackson does not see it: it is no record component.
   */
  @Override
  public boolean logEvent() {
    return !liveOnly;
  }

  @Override
  public String toString() {
    return "AutoscalerTick(" + timestampMs + ", " + point + (liveOnly ? ", live only)" : ")");
  }
}
