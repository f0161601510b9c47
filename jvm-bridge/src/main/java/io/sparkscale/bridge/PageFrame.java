package io.sparkscale.bridge;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;

import org.apache.spark.ui.SparkUITab;
import org.apache.spark.ui.UIUtils;

import scala.Function0;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.xml.Node;
import scala.xml.Unparsed;

/**
 * The Autoscaler page inside Spark's page frame (header, navigation bar, stylesheets), for every Spark line.
 *
 * <p>{@code UIUtils.headerSparkPage} is called by reflection because its signature is not stable within Spark 4:
 * 3.5, 4.0 and 4.1 take (request, title, content, tab, helpText, showVisualization, useDataTables) and 4.2 added a
 * boolean after those. A call compiled against one 4.x release throws NoSuchMethodError on the other, and one jar
 * must serve them all. The four leading parameters have been the same since Spark 3; every later one gets Spark's own
 * default (its {@code headerSparkPage$default$N} method), which is what a Scala caller leaving it out gets. The
 * request is an {@code Object} here because its type (javax or jakarta servlet) is what differs between lines.
 */
final class PageFrame {
  static final String TITLE = "Autoscaler";
  private static final int FIXED_PARAMS = 4;

  /** The resolved method and its trailing arguments; looked up once per class loader, on the first page view. */
  private record Header(Method method, Object[] defaults) {
  }

  private static volatile Header header;

  private PageFrame() {
  }

  static Seq<Node> render(Object request, SparkUITab tab) {
    String html;
    try {
      html = StatusPage.render(SparkscaleBridge.latestStatus(), SparkscaleBridge.latestStatusMs(),
          System.currentTimeMillis());
    } catch (RuntimeException e) {
      // A malformed document must cost a message on the page, never a 500 from the driver UI.
      html = "<div class=\"alert alert-danger\">The autoscaler status could not be rendered: "
          + StatusPage.esc(e.toString()) + "</div>";
    }
    // Unparsed is a Node, and a Node is a Seq<Node>: the ready HTML goes into Spark's page frame as it is.
    Seq<Node> content = new Unparsed(html);
    Function0<Seq<Node>> body = () -> content;
    Header h = header(request, tab);
    Object[] args = new Object[h.method().getParameterCount()];
    args[0] = request;
    args[1] = TITLE;
    args[2] = body;
    args[3] = tab;
    System.arraycopy(h.defaults(), 0, args, FIXED_PARAMS, h.defaults().length);
    try {
      @SuppressWarnings("unchecked")
      Seq<Node> page = (Seq<Node>) h.method().invoke(null, args);
      return page;
    } catch (InvocationTargetException e) {
      Throwable cause = e.getCause();
      if (cause instanceof RuntimeException r) {
        throw r;
      }
      if (cause instanceof Error err) {
        throw err;
      }
      throw new IllegalStateException("UIUtils.headerSparkPage failed", cause);
    } catch (IllegalAccessException e) {
      throw new IllegalStateException("UIUtils.headerSparkPage is not accessible", e);
    }
  }

  private static Header header(Object request, SparkUITab tab) {
    Header h = header;
    if (h == null) {
      h = find(request, tab);
      header = h;
    }
    return h;
  }

  /** The shortest public static headerSparkPage(request, String, Function0, tab, ...) of this Spark. */
  private static Header find(Object request, SparkUITab tab) {
    Method best = null;
    for (Method m : UIUtils.class.getMethods()) {
      Class<?>[] p = m.getParameterTypes();
      if (m.getName().equals("headerSparkPage") && Modifier.isStatic(m.getModifiers()) && p.length >= FIXED_PARAMS
          && p[0].isInstance(request) && p[1] == String.class && p[2] == Function0.class && p[3].isInstance(tab)
          && (best == null || p.length < best.getParameterCount())) {
        best = m;
      }
    }
    if (best == null) {
      throw new IllegalStateException("this Spark has no UIUtils.headerSparkPage(request, String, Function0, "
          + "SparkUITab, ...); the sparkscale bridge does not support this Spark version's UI");
    }
    Class<?>[] p = best.getParameterTypes();
    Object[] defaults = new Object[p.length - FIXED_PARAMS];
    for (int i = FIXED_PARAMS; i < p.length; i++) {
      defaults[i - FIXED_PARAMS] = defaultArgument(i + 1, p[i]);
    }
    return new Header(best, defaults);
  }

  /** Spark's default for parameter {@code position} (1-based); false / None if Spark declares none. */
  private static Object defaultArgument(int position, Class<?> type) {
    try {
      return UIUtils.class.getMethod("headerSparkPage$default$" + position).invoke(null);
    } catch (ReflectiveOperationException e) {
      if (type == boolean.class) {
        return Boolean.FALSE;
      }
      if (type == Option.class) {
        return Option.empty();
      }
      throw new IllegalStateException("UIUtils.headerSparkPage parameter " + position + " (" + type.getName()
          + ") has no default; the sparkscale bridge does not support this Spark version's UI", e);
    }
  }
}
