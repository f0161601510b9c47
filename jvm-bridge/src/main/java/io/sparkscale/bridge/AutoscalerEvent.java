package io.sparkscale.bridge;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * Anything else the autoscaler reports (pause, rollback, blocked scale-up, error...). Same conventions as
 * {@link ScalingEvent}.
 */
public record AutoscalerEvent(String kind, String severity, String reason, Map<String, Object> details,
                              long timestampMs) implements SparkListenerEvent {

  /** An event read back without details (or posted with null) has an empty object, as before records. */
  public AutoscalerEvent {
    details = details == null ? new LinkedHashMap<>() : details;
  }

  @Override
  public String toString() {
    return "AutoscalerEvent(" + kind + ", " + severity + ", " + reason + ")";
  }
}
