package io.sparkscale.bridge;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * An executor change decided by the autoscaler, posted on the listener bus. Spark's JsonProtocol writes events it
 * does not know with Jackson ({@code {"Event": "<class>", ...public fields}}), so public fields are the event-log
 * schema, and the no-arg constructor lets the history server read it back (the jar must be on its classpath).
 */
public class ScalingEvent implements SparkListenerEvent {
  public String action;
  public int fromExecutors;
  public int toExecutors;
  public String reason;
  public boolean applied;
  public String mode;
  /** A JSON object, embedded as such in the event log (not an escaped string). */
  public Map<String, Object> details = new LinkedHashMap<>();
  public long timestampMs;

  public ScalingEvent() {
  }

  public ScalingEvent(String action, int fromExecutors, int toExecutors, String reason, boolean applied, String mode,
                      Map<String, Object> details, long timestampMs) {
    this.action = action;
    this.fromExecutors = fromExecutors;
    this.toExecutors = toExecutors;
    this.reason = reason;
    this.applied = applied;
    this.mode = mode;
    this.details = details;
    this.timestampMs = timestampMs;
  }

  @Override
  public String toString() {
    return "ScalingEvent(" + action + " " + fromExecutors + "->" + toExecutors + ", applied=" + applied
        + ", mode=" + mode + ", reason=" + reason + ")";
  }
}
