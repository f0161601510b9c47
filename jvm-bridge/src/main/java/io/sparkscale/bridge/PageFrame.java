package io.sparkscale.bridge;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.ui.SparkUITab;
import org.apache.spark.ui.UIUtils;

import scala.Function0;
import scala.Option;
import scala.collection.immutable.Seq;
import scala.xml.Node;
import scala.xml.Unparsed;

/**
 * The Autoscaler page inside Spark's page frame (header, navigation bar, stylesheets), for every Spark line, on the
 * driver UI and in the History Server.
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

  /**
   * The page's script, one file per concern (in the jar under io/sparkscale/bridge/tab/), in the order they run:
   * each adds what it offers to {@code window.sparkscaleTab} and takes what it needs from the files before it, so
   * the page needs no bundler and no network. The last one renders the page.
   */
  static final List<String> SCRIPT_MODULES = List.of(
      "format.js", "dom.js", "d3-compat.js", "chart-panel.js", "charts.js", "summary.js", "queries-table.js",
      "decisions-table.js", "events-table.js", "render-and-refresh.js");

  /** The resolved method and its trailing arguments; looked up once per class loader, on the first page view. */
  private record Header(Method method, Object[] defaults) {
  }

  private static volatile Header header;

  private PageFrame() {
  }

  static Seq<Node> render(Object request, AutoscalerTab tab) {
    String html;
    try {
      html = body(tab.content(), staticUri(request, "/static/d3.min.js"), cspNonce(), System.currentTimeMillis());
    } catch (RuntimeException e) {
      // A store that cannot be read must cost a message on the page, never a 500 from the UI.
      html = "<div class=\"alert alert-danger\">The autoscaler status could not be read: "
          + escape(e.toString()) + "</div>";
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
      throw unwrap(e, "UIUtils.headerSparkPage");
    } catch (IllegalAccessException e) {
      throw new IllegalStateException("UIUtils.headerSparkPage is not accessible", e);
    }
  }

  /**
   * The page's own part: its stylesheet, an empty {@code #sparkscale-page} the script fills, the document as JSON
   * data (never executed, and with {@code <}, {@code >} and {@code &} escaped, so no text in it can close the
   * element), d3 from Spark's own static files (3.x in Spark 3.5, 7.x in Spark 4: the script takes either), and
   * the script's modules, one inline script element each, in order. The live page's script fetches this page again
   * once per control interval and renders the new document in place. Scripts carry the request's CSP nonce where
   * Spark sets one (4.3 and later).
   */
  static String body(AutoscalerTab.Content content, String d3Uri, String nonce, long nowMs) {
    String json = content.json();
    String nonceAttribute = nonce == null ? "" : " nonce=\"" + escape(nonce) + "\"";
    StringBuilder scripts = new StringBuilder();
    for (Map.Entry<String, String> module : Assets.SCRIPTS.entrySet()) {
      // sourceURL: the browser's console and debugger name the module a message comes from, not the page.
      scripts.append("<script").append(nonceAttribute).append(">").append(module.getValue())
          .append("\n//# sourceURL=sparkscale-tab/").append(module.getKey()).append("\n</script>");
    }
    return "<style>" + Assets.CSS + "</style>"
        + "<div id=\"sparkscale-page\" data-source=\"" + (content.live() ? "live" : "event-log")
        + "\" data-server-ms=\"" + nowMs + "\"><noscript>The Autoscaler page needs JavaScript.</noscript></div>"
        + "<p id=\"sparkscale-refresh-note\" class=\"text-muted\"></p>"
        + "<script type=\"application/json\" id=\"sparkscale-document\">" + (json == null ? "null" : jsonData(json))
        + "</script>"
        + "<script src=\"" + escape(d3Uri) + "\"" + nonceAttribute + "></script>"
        + scripts;
  }

  /** JSON text safe inside a script element: {@code <}, {@code >} and {@code &} as \\u escapes (JSON reads them
   * back the same), so no string in it can end the element or open a comment. */
  static String jsonData(String json) {
    return json.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026");
  }

  /** HTML-escapes text for element content and quoted attribute values. */
  static String escape(String text) {
    if (text == null) {
      return "";
    }
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;")
        .replace("'", "&#39;");
  }

  /** The page's stylesheet and script modules (by name, in order), from the jar's resources, read once. */
  static final class Assets {
    static final String CSS = read("autoscaler-tab.css");
    static final Map<String, String> SCRIPTS = readAll(SCRIPT_MODULES);

    private static Map<String, String> readAll(List<String> names) {
      Map<String, String> texts = new LinkedHashMap<>();
      for (String name : names) {
        texts.put(name, read(name));
      }
      return Collections.unmodifiableMap(texts);
    }

    private static String read(String name) {
      try (InputStream in = PageFrame.class.getResourceAsStream("tab/" + name)) {
        if (in == null) {
          throw new IllegalStateException("the bridge jar lacks its resource io/sparkscale/bridge/tab/" + name);
        }
        // Inside a script or style element, "</" would end it early: the files never hold one.
        return new String(in.readAllBytes(), StandardCharsets.UTF_8);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  /**
   * {@code path} under the UI's root, as Spark links its own static files: {@code UIUtils.prependBaseUri(request,
   * path, "")} honours a reverse proxy's prefix ({@code spark.ui.proxyBase}, {@code X-Forwarded-Context}). By
   * reflection, as the request's type differs between Spark lines; the path itself when there is no such method.
   */
  static String staticUri(Object request, String path) {
    for (Method m : UIUtils.class.getMethods()) {
      Class<?>[] p = m.getParameterTypes();
      if (m.getName().equals("prependBaseUri") && Modifier.isStatic(m.getModifiers()) && p.length == 3
          && p[0].isInstance(request) && p[1] == String.class && p[2] == String.class) {
        try {
          return (String) m.invoke(null, request, path, "");
        } catch (InvocationTargetException e) {
          throw unwrap(e, "UIUtils.prependBaseUri");
        } catch (IllegalAccessException e) {
          break;
        }
      }
    }
    return path;
  }

  private static RuntimeException unwrap(InvocationTargetException e, String what) {
    Throwable cause = e.getCause();
    if (cause instanceof RuntimeException r) {
      return r;
    }
    if (cause instanceof Error err) {
      throw err;
    }
    return new IllegalStateException(what + " failed", cause);
  }

  /**
   * The nonce of this request's Content-Security-Policy (Spark 4.3 allows only scripts that carry it; its
   * {@code CspNonce} keeps it per request thread), or null when this Spark sets no such policy (no such class).
   */
  static String cspNonce() {
    if (Csp.GET == null) {
      return null;
    }
    try {
      Object nonce = Csp.GET.invoke(null);
      return nonce == null ? null : nonce.toString();
    } catch (ReflectiveOperationException e) {
      return null;
    }
  }

  /** Looked up once, on first use (the holder idiom): {@code CspNonce.get}, or null before Spark 4.3. */
  private static final class Csp {
    static final Method GET = find();

    private static Method find() {
      try {
        return Class.forName("org.apache.spark.ui.CspNonce").getMethod("get");
      } catch (ReflectiveOperationException | LinkageError e) {
        return null;
      }
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
