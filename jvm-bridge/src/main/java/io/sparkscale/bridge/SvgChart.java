package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * Draws the timeline as inline SVG on the server: two panels sharing the time axis, "executors (target, live)
 * against rows/s" and "backlog against utilization", with the scaling actions marked. No JavaScript, no external
 * asset: the page must work on a machine without internet access. Hovering a marker shows the decision's reason
 * (an SVG title).
 */
final class SvgChart {
  static final String[] PALETTE = {"#1f77b4", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
      "#7f7f7f"};
  private static final String LIVE = "#1f77b4";
  private static final String TARGET = "#ff7f0e";
  private static final String INPUT = "#2ca02c";
  private static final String PROCESSED = "#9467bd";
  private static final String BACKLOG = "#969696";
  private static final double WIDTH = 1200;

  private SvgChart() {
  }

  static String render(JsonNode timeline, JsonNode decisions, double utilMin, double utilMax) {
    List<JsonNode> points = new ArrayList<>();
    if (timeline.isArray()) {
      for (JsonNode p : timeline) {
        if (Double.isFinite(StatusPage.num(p.path("t")))) {
          points.add(p);
        }
      }
    }
    if (points.size() < 2) {
      return "<p id=\"sparkscale-chart-empty\">The chart appears after two control ticks.</p>";
    }
    int n = points.size();
    double[] t = column(points, "t");
    Frame f = new Frame(t[0], t[n - 1] > t[0] ? t[n - 1] : t[0] + 1);
    StringBuilder out = new StringBuilder(16 * 1024);
    out.append("<div id=\"sparkscale-chart\" style=\"max-width:").append((int) WIDTH).append("px\">");

    // Panel 1: executors (left axis) against rows/s (right axis).
    double[] live = column(points, "live");
    double[] target = column(points, "target");
    // The load: rows arriving per second (processed + backlog growth); Spark's input rate when that is unknown.
    double[] input = column(points, "arrival_rate");
    if (!Double.isFinite(max(input))) {
      input = column(points, "input_rate");
    }
    double[] processed = column(points, "processed_rate");
    double execTop = Math.max(max(live), max(target));
    execTop = (Double.isFinite(execTop) ? Math.max(1, Math.ceil(execTop)) : 1) + 1;
    double rateTop = niceCeil(Math.max(max(input), max(processed)));
    f.height = 320;
    open(out, f, "sparkscale-chart-executors", "Executors and load over time");
    grid(out, f, execTop, integerStep(execTop), "executors", rateTop, rateTop / 5, "rows/s", false);
    markers(out, f, decisions);
    line(out, f, t, input, rateTop, "series-input", INPUT, 1.5, null, false);
    line(out, f, t, processed, rateTop, "series-processed", PROCESSED, 1.2, "2 3", false);
    line(out, f, t, target, execTop, "series-target", TARGET, 2.5, "7 4", true);
    line(out, f, t, live, execTop, "series-live", LIVE, 2.5, null, true);
    legend(out, f, new String[][] {{"live executors", LIVE, ""}, {"target executors", TARGET, "7 4"},
        {"arriving rows/s = processed + backlog growth (right axis)", INPUT, ""},
        {"processed rows/s (right axis)", PROCESSED, "2 3"}});
    out.append("</svg>");

    // Panel 2: backlog (left axis) against utilization per query (right axis).
    double[] backlog = column(points, "backlog");
    Set<String> labels = new LinkedHashSet<>();
    for (JsonNode p : points) {
      labels.addAll(StatusPage.fieldNames(p.path("queries")));
    }
    List<String> queries = new ArrayList<>(labels).subList(0, Math.min(labels.size(), PALETTE.length));
    double[] appUtil = column(points, "utilization");
    double utilTop = Math.max(1.2, Math.ceil(Math.max(max(appUtil), Double.isFinite(utilMax) ? utilMax : 0) * 5) / 5);
    for (String q : queries) {
      double m = max(queryColumn(points, q));
      if (Double.isFinite(m)) {
        utilTop = Math.max(utilTop, Math.ceil(m * 5) / 5);
      }
    }
    double backlogTop = niceCeil(max(backlog));
    f.height = 230;
    open(out, f, "sparkscale-chart-backlog", "Backlog and utilization over time");
    if (Double.isFinite(utilMin) && Double.isFinite(utilMax) && utilMax > utilMin) {
      // The utilization band inside which the autoscaler takes no action.
      double y1 = f.y(Math.min(utilMax, utilTop), utilTop);
      double y0 = f.y(utilMin, utilTop);
      out.append("<rect class=\"utilization-band\" x=\"").append(c(f.left)).append("\" y=\"").append(c(y1))
          .append("\" width=\"").append(c(f.plotWidth())).append("\" height=\"").append(c(y0 - y1))
          .append("\" fill=\"#2ca02c\" fill-opacity=\"0.08\"/>");
    }
    grid(out, f, backlogTop, backlogTop / 5, "backlog rows", utilTop, utilTop > 2 ? 0.5 : 0.2, "utilization", true);
    markers(out, f, decisions);
    area(out, f, t, backlog, backlogTop, "series-backlog", BACKLOG);
    List<String[]> legend = new ArrayList<>();
    legend.add(new String[] {"backlog (rows)", BACKLOG, ""});
    for (int i = 0; i < queries.size(); i++) {
      String color = PALETTE[i];
      line(out, f, t, queryColumn(points, queries.get(i)), utilTop, "series-utilization", color, 1.8, null, false);
      legend.add(new String[] {"utilization " + queries.get(i), color, ""});
    }
    if (queries.size() != 1) {
      line(out, f, t, appUtil, utilTop, "series-utilization-app", "#000000", 1.5, "5 3", false);
      legend.add(new String[] {"utilization (application)", "#000000", "5 3"});
    }
    if (Double.isFinite(utilMin) && Double.isFinite(utilMax)) {
      legend.add(new String[] {"no-action band", "#2ca02c", "band"});
    }
    legend(out, f, legend.toArray(new String[0][]));
    out.append("</svg></div>");
    return out.toString();
  }

  // ---------------------------------------------------------------- geometry

  private static final class Frame {
    final double left = 62;
    final double right = 70;
    final double top = 46;
    final double bottom = 28;
    final double t0;
    final double t1;
    double height;

    Frame(double t0, double t1) {
      this.t0 = t0;
      this.t1 = t1;
    }

    double plotWidth() {
      return WIDTH - left - right;
    }

    double x(double time) {
      return left + (time - t0) / (t1 - t0) * plotWidth();
    }

    double y(double v, double top) {
      double clamped = Math.max(0, Math.min(v, top));
      return height - bottom - clamped / top * (height - this.top - bottom);
    }
  }

  private static void open(StringBuilder out, Frame f, String id, String title) {
    out.append("<svg id=\"").append(id).append("\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 ")
        .append((int) WIDTH).append(' ').append((int) f.height)
        .append("\" width=\"100%\" role=\"img\" style=\"font-family:sans-serif;font-size:12px;display:block;")
        .append("margin-bottom:8px\"><title>").append(StatusPage.esc(title)).append("</title>")
        .append("<rect x=\"0\" y=\"0\" width=\"").append((int) WIDTH).append("\" height=\"").append((int) f.height)
        .append("\" fill=\"#ffffff\"/>");
  }

  private static void grid(StringBuilder out, Frame f, double leftTop, double leftStep, String leftLabel,
                           double rightTop, double rightStep, String rightLabel, boolean rightPercent) {
    double x0 = f.left;
    double x1 = f.left + f.plotWidth();
    for (double v = 0; v <= leftTop + 1e-9; v += leftStep) {
      double y = f.y(v, leftTop);
      out.append("<line x1=\"").append(c(x0)).append("\" x2=\"").append(c(x1)).append("\" y1=\"").append(c(y))
          .append("\" y2=\"").append(c(y)).append("\" stroke=\"#e5e5e5\"/>")
          .append("<text x=\"").append(c(x0 - 6)).append("\" y=\"").append(c(y + 4))
          .append("\" text-anchor=\"end\" fill=\"#444\">").append(label(v)).append("</text>");
    }
    for (double v = 0; v <= rightTop + 1e-9; v += rightStep) {
      double y = f.y(v, rightTop);
      String text = rightPercent ? String.format(Locale.ROOT, "%.0f%%", v * 100) : label(v);
      out.append("<text x=\"").append(c(x1 + 6)).append("\" y=\"").append(c(y + 4)).append("\" fill=\"#444\">")
          .append(text).append("</text>");
    }
    double yb = f.height - f.bottom;
    out.append("<line x1=\"").append(c(x0)).append("\" x2=\"").append(c(x1)).append("\" y1=\"").append(c(yb))
        .append("\" y2=\"").append(c(yb)).append("\" stroke=\"#888\"/>")
        .append("<line x1=\"").append(c(x0)).append("\" x2=\"").append(c(x0)).append("\" y1=\"").append(c(f.top))
        .append("\" y2=\"").append(c(yb)).append("\" stroke=\"#888\"/>")
        .append("<line x1=\"").append(c(x1)).append("\" x2=\"").append(c(x1)).append("\" y1=\"").append(c(f.top))
        .append("\" y2=\"").append(c(yb)).append("\" stroke=\"#888\"/>");
    // Axis titles, rotated along the axes.
    double midY = (f.top + yb) / 2;
    out.append("<text transform=\"translate(14,").append(c(midY)).append(") rotate(-90)\" text-anchor=\"middle\"")
        .append(" fill=\"#222\">").append(StatusPage.esc(leftLabel)).append("</text>")
        .append("<text transform=\"translate(").append(c(WIDTH - 12)).append(',').append(c(midY))
        .append(") rotate(90)\" text-anchor=\"middle\" fill=\"#222\">").append(StatusPage.esc(rightLabel))
        .append("</text>");
    // Time ticks.
    int ticks = 6;
    for (int i = 0; i <= ticks; i++) {
      double time = f.t0 + (f.t1 - f.t0) * i / ticks;
      double x = f.x(time);
      String anchor = i == 0 ? "start" : i == ticks ? "end" : "middle";
      out.append("<line x1=\"").append(c(x)).append("\" x2=\"").append(c(x)).append("\" y1=\"").append(c(yb))
          .append("\" y2=\"").append(c(yb + 4)).append("\" stroke=\"#888\"/>")
          .append("<text x=\"").append(c(x)).append("\" y=\"").append(c(yb + 17)).append("\" text-anchor=\"")
          .append(anchor).append("\" fill=\"#444\">").append(StatusPage.esc(StatusPage.clock(time))).append("</text>");
    }
  }

  /** Vertical lines at scaling actions (applied: solid; recommendations: dotted), reason on hover. */
  private static void markers(StringBuilder out, Frame f, JsonNode decisions) {
    if (!decisions.isArray()) {
      return;
    }
    double lastLabelX = Double.NEGATIVE_INFINITY;
    int row = 0;
    for (JsonNode d : decisions) {
      String action = d.path("action").asText("none");
      double time = StatusPage.num(d.path("time"));
      if ("none".equals(action) || !Double.isFinite(time) || time < f.t0 || time > f.t1) {
        continue;
      }
      boolean applied = d.path("applied").asBoolean(false);
      String color = "scale_up".equals(action) ? "#2ca02c" : "scale_down".equals(action) ? "#1f77b4" : "#d62728";
      String symbol = "scale_up".equals(action) ? "\u25B2" : "scale_down".equals(action) ? "\u25BC" : "\u21BA";
      double x = f.x(time);
      // Labels of close actions go on alternating rows instead of on top of each other.
      row = x - lastLabelX < 48 ? 1 - row : 0;
      lastLabelX = x;
      String from = d.path("from_executors").asText("?");
      String to = d.path("to_executors").asText("?");
      String tip = action + " " + from + " -> " + to + (applied ? "" : " (not applied)") + ": "
          + d.path("reason").asText("");
      out.append("<g class=\"marker marker-").append(StatusPage.esc(action)).append("\"><title>")
          .append(StatusPage.esc(tip)).append("</title>")
          .append("<line x1=\"").append(c(x)).append("\" x2=\"").append(c(x)).append("\" y1=\"").append(c(f.top))
          .append("\" y2=\"").append(c(f.height - f.bottom)).append("\" stroke=\"").append(color)
          .append("\" stroke-width=\"1.2\"").append(applied ? "" : " stroke-dasharray=\"2 3\"").append("/>")
          .append("<text x=\"").append(c(x)).append("\" y=\"").append(c(f.top - 3 - 12 * row))
          .append("\" text-anchor=\"middle\" fill=\"").append(color).append("\">").append(symbol)
          .append(' ').append(StatusPage.esc(from)).append("&#8594;").append(StatusPage.esc(to))
          .append("</text></g>");
    }
  }

  /** A polyline per run of finite values (a missing value breaks the line); step lines hold until the next point. */
  private static void line(StringBuilder out, Frame f, double[] t, double[] v, double top, String cls, String color,
                           double width, String dash, boolean step) {
    for (int[] run : runs(v)) {
      if (run[0] == run[1]) {
        out.append("<circle class=\"").append(cls).append("\" cx=\"").append(c(f.x(t[run[0]]))).append("\" cy=\"")
            .append(c(f.y(v[run[0]], top))).append("\" r=\"2.5\" fill=\"").append(color).append("\"/>");
        continue;
      }
      StringBuilder pts = new StringBuilder();
      int count = 0;
      for (int i = run[0]; i <= run[1]; i++) {
        if (step && i > run[0]) {
          pts.append(c(f.x(t[i]))).append(',').append(c(f.y(v[i - 1], top))).append(' ');
          count++;
        }
        pts.append(c(f.x(t[i]))).append(',').append(c(f.y(v[i], top))).append(' ');
        count++;
      }
      out.append("<polyline class=\"").append(cls).append("\" data-points=\"").append(count)
          .append("\" fill=\"none\" stroke=\"").append(color).append("\" stroke-width=\"").append(c(width))
          .append("\" stroke-linejoin=\"round\"").append(dash == null ? "" : " stroke-dasharray=\"" + dash + "\"")
          .append(" points=\"").append(pts.toString().trim()).append("\"/>");
    }
  }

  private static void area(StringBuilder out, Frame f, double[] t, double[] v, double top, String cls, String color) {
    double base = f.height - f.bottom;
    for (int[] run : runs(v)) {
      int first = run[0];
      int last = run[1];
      if (last == first) {
        continue;
      }
      StringBuilder edge = new StringBuilder();
      for (int i = first; i <= last; i++) {
        edge.append(c(f.x(t[i]))).append(',').append(c(f.y(v[i], top))).append(' ');
      }
      String line = edge.toString().trim();
      out.append("<polygon class=\"").append(cls).append("\" points=\"").append(c(f.x(t[first]))).append(',')
          .append(c(base)).append(' ').append(line).append(' ').append(c(f.x(t[last]))).append(',').append(c(base))
          .append("\" fill=\"").append(color).append("\" fill-opacity=\"0.3\" stroke=\"none\"/>")
          .append("<polyline class=\"").append(cls).append("\" data-points=\"").append(last - first + 1)
          .append("\" fill=\"none\" stroke=\"").append(color).append("\" stroke-width=\"1.5\" points=\"")
          .append(line).append("\"/>");
    }
  }

  private static void legend(StringBuilder out, Frame f, String[][] items) {
    double x = f.left;
    double y = 14;
    for (String[] item : items) {
      String text = item[0];
      if ("band".equals(item[2])) {
        out.append("<rect x=\"").append(c(x)).append("\" y=\"").append(c(y - 7)).append("\" width=\"22\" height=\"10\"")
            .append(" fill=\"").append(item[1]).append("\" fill-opacity=\"0.15\"/>");
      } else {
        out.append("<line x1=\"").append(c(x)).append("\" x2=\"").append(c(x + 22)).append("\" y1=\"").append(c(y - 2))
            .append("\" y2=\"").append(c(y - 2)).append("\" stroke=\"").append(item[1])
            .append("\" stroke-width=\"2.5\"").append(item[2].isEmpty() ? "" : " stroke-dasharray=\"" + item[2] + "\"")
            .append("/>");
      }
      out.append("<text x=\"").append(c(x + 27)).append("\" y=\"").append(c(y + 2)).append("\" fill=\"#222\">")
          .append(StatusPage.esc(text)).append("</text>");
      x += 42 + 6.3 * text.length(); // about the width of 12px sans-serif text
    }
  }

  // ---------------------------------------------------------------- data

  private static double[] column(List<JsonNode> points, String field) {
    double[] out = new double[points.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = StatusPage.num(points.get(i).path(field));
    }
    return out;
  }

  private static double[] queryColumn(List<JsonNode> points, String query) {
    double[] out = new double[points.size()];
    for (int i = 0; i < out.length; i++) {
      out[i] = StatusPage.num(points.get(i).path("queries").path(query));
    }
    return out;
  }

  /** Runs of consecutive finite values, as [first, last] index pairs. */
  private static List<int[]> runs(double[] v) {
    List<int[]> out = new ArrayList<>();
    int start = -1;
    for (int i = 0; i <= v.length; i++) {
      boolean ok = i < v.length && Double.isFinite(v[i]);
      if (ok && start < 0) {
        start = i;
      } else if (!ok && start >= 0) {
        out.add(new int[] {start, i - 1});
        start = -1;
      }
    }
    return out;
  }

  private static double max(double[] v) {
    double m = Double.NaN;
    for (double x : v) {
      if (Double.isFinite(x) && !(x <= m)) {
        m = x;
      }
    }
    return m;
  }

  /** 1, 2, 2.5, 5 or 10 times a power of ten, at least v (1 for nothing or zero). */
  static double niceCeil(double v) {
    if (!Double.isFinite(v) || v <= 0) {
      return 1;
    }
    double p = Math.pow(10, Math.floor(Math.log10(v)));
    double f = v / p;
    double nice = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
    return nice * p;
  }

  private static double integerStep(double top) {
    return top <= 10 ? 1 : Math.ceil(top / 8);
  }

  private static String label(double v) {
    if (v >= 1_000_000) {
      return String.format(Locale.ROOT, "%.1fM", v / 1_000_000).replace(".0M", "M");
    }
    if (v >= 10_000) {
      return String.format(Locale.ROOT, "%.0fk", v / 1000);
    }
    return v == Math.rint(v) ? String.format(Locale.ROOT, "%.0f", v) : String.format(Locale.ROOT, "%.1f", v);
  }

  /** A coordinate with one decimal: enough for a 1200-unit-wide picture, compact, and cheaper than format(). */
  private static String c(double v) {
    long tenths = Math.round(v * 10);
    long whole = tenths / 10;
    long frac = Math.abs(tenths % 10);
    return (tenths < 0 && whole == 0 ? "-" : "") + whole + (frac == 0 ? "" : "." + frac);
  }
}
