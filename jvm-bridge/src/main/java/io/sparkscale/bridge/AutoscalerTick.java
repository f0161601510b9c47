package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * One control tick, summarized for the event log: what the Autoscaler tab's chart, summary and decision table need
 * once the driver is gone (the History Server rebuilds the tab from these, see {@link HistoryPlugin}). Python decides
 * which ticks are posted (at most one per {@code spark.sparkscale.events.tickInterval}, plus every tick that changed
 * the executors, the pause state or made a decision other than "none") and documents the fields in
 * sparkscale_listener/ui.py. Same event-log conventions as {@link ScalingEvent}.
 *
 * @param point    one point of the chart's timeline (t, live, target, rates, backlog, utilization, per query)
 * @param decision the tick's last decision (action, reason) and how many "none" decisions it stands for
 * @param status   mode, pause state and reason, pending executors, provisioning time, errors
 * @param queries  per query: name, backlog, rates, utilization (the queries table)
 * @param config   the settings the tab shows (interval, executor limits, utilization band); first tick event only
 */
public record AutoscalerTick(Map<String, Object> point, Map<String, Object> decision, Map<String, Object> status,
                             List<Map<String, Object>> queries, Map<String, Object> config, long timestampMs)
    implements SparkListenerEvent {

  /** Missing parts are empty objects, so a reader never meets null. */
  public AutoscalerTick {
    point = point == null ? new LinkedHashMap<>() : point;
    decision = decision == null ? new LinkedHashMap<>() : decision;
    status = status == null ? new LinkedHashMap<>() : status;
    queries = queries == null ? new ArrayList<>() : queries;
    config = config == null ? new LinkedHashMap<>() : config;
  }

  @Override
  public String toString() {
    return "AutoscalerTick(" + timestampMs + ", " + point + ")";
  }
}
