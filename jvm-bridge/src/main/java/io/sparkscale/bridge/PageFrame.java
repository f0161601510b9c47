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

  /** The resolved method and its trailing arguments; looked up once per class loader, on the first page view. */
  private record Header(Method method, Object[] defaults) {
  }

  private static volatile Header header;

  /**
   * The live page refreshes itself: every {@code data-refresh-ms} (the control-loop interval) it fetches its own URL
   * and swaps in the new {@code #sparkscale-page} (the first one, for a page opened before the first tick), so the
   * scroll position and the rest of Spark's frame stay put; the age of the last tick counts up every second in
   * between. Three failed fetches in a row (the driver is gone once the application ends) stop it, with a note
   * saying so. Plain inline script: no external asset, works offline.
   */
  static final String SELF_REFRESH = "<p id=\"sparkscale-refresh-note\" class=\"text-muted\"></p><script>\n"
      + "(function () {\n"
      + "  var refreshes = 0, failures = 0;\n"
      + "  function page() { return document.getElementById('sparkscale-page'); }\n"
      + "  function every() {\n"
      + "    var p = page(), ms = p ? Number(p.getAttribute('data-refresh-ms')) : 0;\n"
      + "    return ms > 0 ? ms : 5000;\n"
      + "  }\n"
      + "  function showAge() {\n"
      + "    var el = document.getElementById('sparkscale-tick-age');\n"
      + "    if (!el) { return; }\n"
      + "    if (!el.hasAttribute('data-shown-at')) { el.setAttribute('data-shown-at', String(Date.now())); }\n"
      + "    var age = Number(el.getAttribute('data-age-s'))\n"
      + "        + Math.floor((Date.now() - Number(el.getAttribute('data-shown-at'))) / 1000);\n"
      + "    el.textContent = age + ' s ago';\n"
      + "  }\n"
      + "  function note(text) { document.getElementById('sparkscale-refresh-note').textContent = text; }\n"
      + "  function refresh() {\n"
      + "    if (document.hidden) { setTimeout(refresh, every()); return; }\n"
      + "    fetch(window.location.href, {cache: 'no-store', credentials: 'same-origin'})\n"
      + "      .then(function (r) { if (!r.ok) { throw new Error('HTTP ' + r.status); } return r.text(); })\n"
      + "      .then(function (text) {\n"
      + "        var next = new DOMParser().parseFromString(text, 'text/html').getElementById('sparkscale-page');\n"
      + "        var current = page() || document.getElementById('sparkscale-no-status');\n"
      + "        if (next && current) {\n"
      + "          refreshes += 1;\n"
      + "          next.setAttribute('data-refreshes', String(refreshes));\n"
      + "          current.replaceWith(next);\n"
      + "        }\n"
      + "        failures = 0;\n"
      + "        note('');\n"
      + "        showAge();\n"
      + "        setTimeout(refresh, every());\n"
      + "      })\n"
      + "      .catch(function (err) {\n"
      + "        failures += 1;\n"
      + "        if (failures >= 3) {\n"
      + "          note('This page stopped refreshing: the driver does not answer (' + err.message\n"
      + "              + '); the application may have ended. Its History Server shows the same tab.');\n"
      + "          return;\n"
      + "        }\n"
      + "        setTimeout(refresh, every());\n"
      + "      });\n"
      + "  }\n"
      + "  showAge();\n"
      + "  setInterval(showAge, 1000);\n"
      + "  setTimeout(refresh, every());\n"
      + "})();\n"
      + "</script>";

  private PageFrame() {
  }

  static Seq<Node> render(Object request, AutoscalerTab tab) {
    String html;
    try {
      html = tab.html(System.currentTimeMillis());
    } catch (RuntimeException e) {
      // A malformed document must cost a message on the page, never a 500 from the UI.
      html = "<div class=\"alert alert-danger\">The autoscaler status could not be rendered: "
          + StatusPage.esc(e.toString()) + "</div>";
    }
    if (tab.live()) {
      String nonce = cspNonce();
      html = html + SELF_REFRESH.replace("<script>", nonce == null ? "<script>"
          : "<script nonce=\"" + StatusPage.esc(nonce) + "\">");
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
