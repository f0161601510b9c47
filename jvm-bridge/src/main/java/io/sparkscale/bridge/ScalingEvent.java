package io.sparkscale.bridge;

import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * An executor change decided by the autoscaler, posted on the listener bus. Spark's JsonProtocol writes events it
 * does not know with Jackson ({@code {"Event": "<class>", ...components}}), so the record components are the
 * event-log schema; Jackson reads a record back through its canonical constructor, which is what the history
 * server does (the jar must be on its classpath).
 *
 * @param details a JSON object, embedded as such in the event log (not an escaped string)
 */
public record ScalingEvent(String action, int fromExecutors, int toExecutors, String reason, boolean applied,
                           String mode, Map<String, Object> details, long timestampMs)
    implements SparkListenerEvent {

  /** An event read back without details (or posted with null) has an empty object, as before records. */
  public ScalingEvent {
    details = details == null ? new LinkedHashMap<>() : details;
  }

  @Override
  public String toString() {
    return "ScalingEvent(" + action + " " + fromExecutors + "->" + toExecutors + ", applied=" + applied
        + ", mode=" + mode + ", reason=" + reason + ")";
  }
}
