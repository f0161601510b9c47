package io.sparkscale.bridge;

import java.lang.reflect.Method;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.scheduler.SparkListenerEvent;

/**
 * Reads Structured Streaming's listener events as they reach the driver's listener bus. Every SparkSession's
 * {@code StreamingQueryListenerBus} posts its queries' events to the SparkContext's bus (that is how Spark's own
 * streaming UI, one listener for the application, sees them all), so a SparkListener sees the queries of every
 * session: Spark Connect's, one per client session, and pipelines' as well as the application's own.
 *
 * <p>The classes are named, not linked: spark-sql is not on the class path of every application (a plain
 * SparkContext one), and this bridge is compiled without it. The accessors read here are the same on Spark 3.5 and
 * 4.x ({@code id()}, {@code runId()}, {@code name()}, {@code exception()}, {@code progress().json()}).
 */
final class StreamingEvents {
  private static final String PREFIX = "org.apache.spark.sql.streaming.StreamingQueryListener$";
  static final String STARTED = PREFIX + "QueryStartedEvent";
  static final String PROGRESS = PREFIX + "QueryProgressEvent";
  static final String IDLE = PREFIX + "QueryIdleEvent";
  static final String TERMINATED = PREFIX + "QueryTerminatedEvent";

  private StreamingEvents() {
  }

  /**
   * The event as a record for Python ({@code timeMs}: when it reached this listener), or null when it is not one of
   * a query's start, progress, idle or termination events.
   */
  static Map<String, Object> fields(SparkListenerEvent event, long timeMs) throws ReflectiveOperationException {
    return fields(event.getClass().getName(), event, timeMs);
  }

  /** {@link #fields(SparkListenerEvent, long)} of an event of class {@code type} (tests give a stand-in's). */
  static Map<String, Object> fields(String type, Object event, long timeMs) throws ReflectiveOperationException {
    Map<String, Object> out = new LinkedHashMap<>();
    switch (type) {
      case STARTED -> {
        out.put("type", "started");
        ids(event, out);
        out.put("name", call(event, "name"));
      }
      case PROGRESS -> {
        out.put("type", "progress");
        // The progress's own JSON (StreamingQueryProgress.json), as the Python listener reads it.
        out.put("progress", String.valueOf(call(call(event, "progress"), "json")));
      }
      case IDLE -> {
        out.put("type", "idle");
        ids(event, out);
      }
      case TERMINATED -> {
        out.put("type", "terminated");
        ids(event, out);
        Object exception = call(event, "exception"); // scala.Option[String]
        out.put("exception", exception instanceof scala.Option<?> o && o.isDefined() ? String.valueOf(o.get()) : null);
      }
      default -> {
        return null;
      }
    }
    out.put("timeMs", timeMs);
    return out;
  }

  private static void ids(Object event, Map<String, Object> out) throws ReflectiveOperationException {
    out.put("id", String.valueOf(call(event, "id")));
    out.put("runId", String.valueOf(call(event, "runId")));
  }

  private static Object call(Object target, String accessor) throws ReflectiveOperationException {
    Method m = target.getClass().getMethod(accessor);
    return m.invoke(target);
  }
}
