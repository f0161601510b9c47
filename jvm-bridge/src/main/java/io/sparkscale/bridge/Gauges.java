package io.sparkscale.bridge;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

import com.codahale.metrics.Gauge;
import com.codahale.metrics.MetricRegistry;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * The autoscaler's gauges as Python publishes them each tick (see {@link SparkscaleBridge#publishGauges}): in the
 * plugin's metric registry, and as the Prometheus text /autoscaler/metrics serves.
 */
final class Gauges {
  private static final ObjectMapper MAPPER = new ObjectMapper();

  private static volatile MetricRegistry registry;
  // Values outlive registration so a gauge set before the plugin starts still reports it.
  private static final ConcurrentHashMap<String, Double> VALUES = new ConcurrentHashMap<>();
  private static final ConcurrentHashMap<String, Boolean> REGISTERED = new ConcurrentHashMap<>();
  // The gauges in the Prometheus text format, as Python rendered them last; served at /autoscaler/metrics.
  private static volatile String metricsText = "";

  private Gauges() {
  }

  /** A new registry (the plugin's), with {@code defaults} registered now and others when first set. */
  static synchronized void install(MetricRegistry metrics, String[] defaults) {
    registry = metrics;
    VALUES.clear();
    REGISTERED.clear();
    metricsText = "";
    for (String name : defaults) {
      register(name);
    }
  }

  static synchronized void uninstall() {
    registry = null;
    REGISTERED.clear();
  }

  /** The latest Prometheus text published ("" before the first). */
  static String text() {
    return metricsText;
  }

  /** See {@link SparkscaleBridge#publishGauges}. */
  static void publish(String valuesJson, String removedJson, String text) {
    try {
      for (String name : MAPPER.readValue(removedJson, String[].class)) {
        remove(name);
      }
      Map<String, Double> values = MAPPER.readValue(valuesJson,
          new TypeReference<LinkedHashMap<String, Double>>() { });
      values.forEach(Gauges::set);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("gauges: not the JSON publishGauges takes: " + e.getOriginalMessage(), e);
    }
    metricsText = text == null ? "" : text;
  }

  private static void set(String name, double value) {
    if (name == null || name.isEmpty()) {
      return;
    }
    VALUES.put(name, value);
    if (!REGISTERED.containsKey(name)) {
      register(name);
    }
  }

  /** Unknown names are ignored. */
  private static synchronized void remove(String name) {
    if (name == null) {
      return;
    }
    VALUES.remove(name);
    if (REGISTERED.remove(name) != null) {
      MetricRegistry r = registry;
      if (r != null) {
        r.remove(name);
      }
    }
  }

  /**
   * Registered in the plugin's own registry: Spark nests it under "plugin.&lt;class&gt;" in the metrics system, and
   * Dropwizard forwards later additions to a child registry to its parent, so lazy gauges reach the sinks too.
   */
  private static synchronized void register(String name) {
    MetricRegistry r = registry;
    if (r == null || REGISTERED.containsKey(name)) {
      return;
    }
    Gauge<Double> gauge = () -> VALUES.getOrDefault(name, Double.NaN);
    try {
      r.register(name, gauge);
    } catch (IllegalArgumentException alreadyThere) {
      // Someone registered the name first; ours would be a duplicate.
    }
    REGISTERED.put(name, Boolean.TRUE);
  }
}
