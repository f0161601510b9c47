package io.sparkscale.bridge;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.scheduler.SparkListenerEvent;

/** Anything else the autoscaler reports (pause, rollback, blocked scale-up, error...). Same conventions as ScalingEvent. */
public class AutoscalerEvent implements SparkListenerEvent {
  public String kind;
  public String severity;
  public String reason;
  public Map<String, Object> details = new LinkedHashMap<>();
  public long timestampMs;

  public AutoscalerEvent() {
  }

  public AutoscalerEvent(String kind, String severity, String reason, Map<String, Object> details, long timestampMs) {
    this.kind = kind;
    this.severity = severity;
    this.reason = reason;
    this.details = details;
    this.timestampMs = timestampMs;
  }

  @Override
  public String toString() {
    return "AutoscalerEvent(" + kind + ", " + severity + ", " + reason + ")";
  }
}
