package io.sparkscale.bridge;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;

import org.apache.spark.ui.JettyUtils;
import org.apache.spark.ui.SparkUI;

/**
 * The autoscaler's own Prometheus endpoint on the driver UI, {@code /autoscaler/metrics}.
 *
 * <p>Why not only Spark's PrometheusServlet: its output has no HELP or TYPE lines and names every series after the
 * plugin class ({@code ..._SparkscalePlugin_targetExecutors_Value}), which {@code promtool check metrics} rejects
 * whatever the gauges are called. Here the names are snake_case with units, per-query series carry a {@code query}
 * label, and every family has its help text. The gauges still go to Spark's metrics system too, for its other
 * sinks.
 *
 * <p>Attached by reflection, as {@link PageFrame} calls headerSparkPage: the handler type in the signatures of
 * {@code JettyUtils.createServletHandler} and {@code SparkUI.attachHandler} moved within Spark 4 from
 * {@code org.sparkproject.jetty.servlet} (3.5 and 4.0) to Jetty 12's {@code org.sparkproject.jetty.ee10.servlet}
 * (4.3), so a direct call compiled against one 4.x release would fail with NoSuchMethodError on another.
 */
final class MetricsEndpoint {
  static final String PATH = "/" + AutoscalerTab.PREFIX + "/metrics";
  // The Prometheus text exposition format, version 0.0.4.
  static final String CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

  private final SparkUI ui;
  private final Object handler;

  private MetricsEndpoint(SparkUI ui, Object handler) {
    this.ui = ui;
    this.handler = handler;
  }

  /** Serves {@link #PATH} on this UI; the caller keeps the result to detach it. */
  static MetricsEndpoint attachTo(SparkUI ui) {
    Object servlet = new MetricsServlet();
    Method create = null;
    for (Method m : JettyUtils.class.getMethods()) {
      Class<?>[] p = m.getParameterTypes();
      if (m.getName().equals("createServletHandler") && Modifier.isStatic(m.getModifiers()) && p.length == 3
          && p[0] == String.class && p[1].isInstance(servlet) && p[2] == String.class) {
        create = m;
      }
    }
    if (create == null) {
      throw new IllegalStateException("this Spark has no JettyUtils.createServletHandler(String, HttpServlet, "
          + "String); the autoscaler's /autoscaler/metrics endpoint is not available");
    }
    // basePath "": the driver UI's own handlers (Spark's PrometheusServlet included) are attached the same way.
    Object handler = invoke(create, null, PATH, servlet, "");
    invoke(method(ui, "attachHandler", handler), ui, handler);
    return new MetricsEndpoint(ui, handler);
  }

  void detach() {
    invoke(method(ui, "detachHandler", handler), ui, handler);
  }

  /** The public one-argument method of {@code target} called {@code name} that takes {@code argument}. */
  private static Method method(Object target, String name, Object argument) {
    for (Method m : target.getClass().getMethods()) {
      if (m.getName().equals(name) && m.getParameterCount() == 1 && m.getParameterTypes()[0].isInstance(argument)) {
        return m;
      }
    }
    throw new IllegalStateException("this Spark's UI has no " + name + "(" + argument.getClass().getName() + ")");
  }

  private static Object invoke(Method m, Object target, Object... args) {
    try {
      return m.invoke(target, args);
    } catch (InvocationTargetException e) {
      Throwable cause = e.getCause();
      if (cause instanceof RuntimeException r) {
        throw r;
      }
      if (cause instanceof Error err) {
        throw err;
      }
      throw new IllegalStateException(m.getName() + " failed", cause);
    } catch (IllegalAccessException e) {
      throw new IllegalStateException(m.getName() + " is not accessible", e);
    }
  }
}
