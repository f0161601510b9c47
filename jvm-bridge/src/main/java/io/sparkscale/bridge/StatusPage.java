package io.sparkscale.bridge;

import java.time.Instant;
import java.time.ZoneId;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;

/**
 * Renders the document Python publishes (see sparkscale_listener/ui.py for its schema) as the HTML of the
 * Autoscaler tab. Pure: no Spark types, so it is cheap to call and easy to reason about. Every piece of text from
 * the document goes through {@link #esc}: reasons and query names are user data.
 *
 * <p>Only Spark's own stylesheet (served by the driver) and inline styles are used: no external asset, so the page
 * works on machines without internet access.
 */
final class StatusPage {
  // Python's json.dumps writes NaN/Infinity tokens for non-finite floats.
  private static final ObjectMapper LENIENT = JsonMapper.builder()
      .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS).build();
  private static final DateTimeFormatter CLOCK = DateTimeFormatter.ofPattern("HH:mm:ss", Locale.ROOT);
  private static final DateTimeFormatter DATE_CLOCK =
      DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss", Locale.ROOT);
  static final int MAX_DECISIONS = 100;

  private StatusPage() {
  }

  static String render(String json, long receivedMs, long nowMs) {
    if (json == null || json.isBlank()) {
      return "<p id=\"sparkscale-no-status\">The autoscaler has not published its status yet: it publishes at "
          + "the end of every control tick, so the first one appears one interval after the session started."
          + "</p>";
    }
    JsonNode doc;
    try {
      doc = LENIENT.readTree(json);
    } catch (JsonProcessingException e) {
      return "<div class=\"alert alert-danger\">The published autoscaler status is not valid JSON: "
          + esc(e.getOriginalMessage()) + "</div>";
    }
    return render(doc, receivedMs, nowMs);
  }

  /**
   * The page for a document: the live one Python published ({@code receivedMs}: when it arrived), or one rebuilt
   * from an event log by {@link HistoryDocument} (it has a "history" member; {@code receivedMs} is not used).
   */
  static String render(JsonNode doc, long receivedMs, long nowMs) {
    StringBuilder out = new StringBuilder(32 * 1024);
    JsonNode history = doc.path("history");
    double interval = num(doc.path("config").path("interval_s"));
    out.append("<div id=\"sparkscale-page\"");
    if (history.isObject()) {
      out.append(" data-source=\"event-log\"");
    } else if (Double.isFinite(interval)) {
      // The live page refreshes itself once per control tick (PageFrame.SELF_REFRESH), within sane bounds.
      long refreshMs = Math.round(Math.max(2, Math.min(30, interval)) * 1000);
      out.append(" data-source=\"live\" data-refresh-ms=\"").append(refreshMs).append('"');
    }
    out.append(" data-published=\"").append(fmtPlain(num(doc.path("published")))).append("\">");
    if (history.isObject()) {
      summary(out, doc, history);
    } else {
      summary(out, doc, receivedMs, nowMs);
    }
    out.append("<h4 style=\"margin-top:1.2em\">Executors against load</h4>");
    JsonNode config = doc.path("config");
    out.append(SvgChart.render(doc.path("timeline"), doc.path("decisions"),
        num(config.path("utilization_min")), num(config.path("utilization_max"))));
    queries(out, doc.path("queries"), doc.path("status").path("blocked_queries"),
        num(doc.path("published")) - 1.5 * num(config.path("interval_s")));
    decisions(out, doc.path("decisions"), history.isObject() ? HistoryDocument.MAX_DECISIONS : MAX_DECISIONS);
    if (doc.has("events")) {
      events(out, doc.path("events"));
    }
    out.append("</div>");
    return out.toString();
  }

  // ---------------------------------------------------------------- sections

  /** The live summary: ends with when the last tick ran, counting up in the browser (PageFrame.SELF_REFRESH). */
  private static void summary(StringBuilder out, JsonNode doc, long receivedMs, long nowMs) {
    state(out, doc, true);
    double published = num(doc.path("published"));
    double interval = num(doc.path("config").path("interval_s"));
    long ageS = Math.max(0, (nowMs - receivedMs) / 1000);
    String tick = "<span id=\"sparkscale-last-tick\">" + (Double.isFinite(published) ? esc(dateClock(published))
        : "?") + "</span> (<span id=\"sparkscale-tick-age\" data-age-s=\"" + ageS + "\">" + ageS + " s ago</span>)"
        + (Double.isFinite(interval) ? "; the control loop runs every " + fmt(interval) + " s" : "");
    if (Double.isFinite(interval) && ageS > 3 * interval + 30) {
      tick += " <strong style=\"color:#d62728\">stale: the control loop may have stopped</strong>";
    }
    item(out, "Last tick", tick + " <span class=\"text-muted\">(this page refreshes itself)</span>");
    out.append("</ul>");
  }

  /** The summary of an application read back from its event log. */
  private static void summary(StringBuilder out, JsonNode doc, JsonNode history) {
    state(out, doc, false);
    double lastTick = num(history.path("last_tick"));
    double ended = num(history.path("ended"));
    item(out, "Last tick", "<span id=\"sparkscale-last-tick\">" + (Double.isFinite(lastTick)
        ? esc(dateClock(lastTick)) : "none recorded") + "</span>");
    item(out, "Source", "<span id=\"sparkscale-source\">rebuilt from the event log: "
        + history.path("ticks").asLong(0) + " tick summaries, " + history.path("scalings").asLong(0)
        + " scaling events, " + history.path("events").asLong(0) + " other events; "
        + (Double.isFinite(ended) ? "the application ended " + esc(dateClock(ended))
        : "the application had not ended when the log was read") + "</span>");
    out.append("</ul>");
  }

  /** Mode, executors, pause, utilization, last scaling, provisioning time and errors (an open list). */
  private static void state(StringBuilder out, JsonNode doc, boolean live) {
    JsonNode s = doc.path("status");
    JsonNode config = doc.path("config");
    String mode = s.path("mode").asText("?");
    out.append("<ul class=\"list-unstyled\" id=\"sparkscale-summary\">");
    item(out, "Mode", "<span id=\"sparkscale-mode\">" + esc(mode) + "</span> <span class=\"text-muted\">("
        + esc(modeNote(mode)) + ")</span>");
    String executors = "<span id=\"sparkscale-target\">" + intText(s.path("target_executors")) + "</span> target, "
        + "<span id=\"sparkscale-live\">" + intText(s.path("live_executors")) + "</span> live, "
        + "<span id=\"sparkscale-pending\">" + intText(s.path("pending_executors")) + "</span> pending";
    if (config.has("min_executors")) {
      executors += " <span class=\"text-muted\">(allowed " + intText(config.path("min_executors")) + " to "
          + intText(config.path("max_executors")) + ")</span>";
    }
    item(out, "Executors", executors);

    boolean stopped = s.path("stopped").asBoolean(false);
    boolean paused = s.path("paused").asBoolean(false);
    String pauseText;
    if (stopped || paused) {
      String why = s.path("pause_reason").isTextual() ? s.path("pause_reason").asText() : "no reason given";
      pauseText = "<span style=\"" + BADGE + "background:#d62728\">" + (stopped ? "stopped" : "paused")
          + "</span> " + esc(why)
          + (live ? " <span class=\"text-muted\">(resume with autoscaler(spark).resume())</span>" : "");
    } else {
      pauseText = "no";
    }
    item(out, "Paused", "<span id=\"sparkscale-paused\">" + pauseText + "</span>");

    JsonNode util = s.path("last_decision").path("utilization");
    if (!util.isMissingNode() && !util.isNull()) {
      String band = config.has("utilization_min")
          ? " <span class=\"text-muted\">(band " + pct(num(config.path("utilization_min"))) + " to "
            + pct(num(config.path("utilization_max"))) + ", target " + pct(num(config.path("utilization_target")))
            + ")</span>"
          : "";
      item(out, "Utilization", pct(num(util)) + band);
    }
    JsonNode last = s.path("last_scaling");
    if (last.isObject()) {
      item(out, "Last scaling", esc(last.path("action").asText()) + " " + intText(last.path("from_executors"))
          + " &rarr; " + intText(last.path("to_executors")) + " at " + esc(clock(num(last.path("time"))))
          + ": " + esc(last.path("reason").asText()));
    }
    item(out, "Provisioning time", fmt(num(s.path("provisioning_time_s"))) + " s"
        + " <span class=\"text-muted\">(learned: request to registered executor)</span>");
    int errors = s.path("errors").asInt(0);
    if (errors > 0) {
      item(out, "Errors", errors + ", last: " + esc(s.path("last_error").asText("")));
    }
  }

  /** Per query; evaluations older than {@code freshAfter} (epoch s) are labelled with their time. */
  private static void queries(StringBuilder out, JsonNode queries, JsonNode blocked, double freshAfter) {
    out.append("<h4 style=\"margin-top:1.2em\">Streaming queries</h4>");
    if (!queries.isArray() || queries.isEmpty()) {
      out.append("<p>No streaming query has reported progress yet.</p>");
      return;
    }
    out.append("<table class=\"table table-bordered table-sm table-striped\" id=\"sparkscale-queries\">")
        .append("<thead><tr><th>Query</th><th>Utilization</th><th>Backlog (rows)</th><th>Input rows/s</th>")
        .append("<th>Processed rows/s</th><th>Arrival rows/s</th><th>Required slots</th><th>Notes</th></tr>")
        .append("</thead><tbody>");
    for (JsonNode q : queries) {
      String id = q.path("id").asText("");
      String name = q.path("name").isTextual() ? q.path("name").asText() : "";
      List<String> notes = new ArrayList<>();
      if (!q.path("active").asBoolean(true)) {
        notes.add("terminated");
      }
      if (q.path("backlog_mode").asBoolean(false)) {
        notes.add("backlog mode (no scale-down)");
      }
      if (blocked.isObject() && blocked.has(id)) {
        notes.add("scale-ups blocked: " + blocked.path(id).asText());
      }
      if (!q.path("note").asText("").isEmpty()) {
        notes.add(q.path("note").asText());
      }
      double evaluatedAt = num(q.path("evaluated_at"));
      if (Double.isFinite(evaluatedAt) && Double.isFinite(freshAfter) && evaluatedAt < freshAfter) {
        // After a change the evaluator waits for a full window: say that the figures are the last ones.
        notes.add(0, "utilization, arrival and slots as evaluated at " + clock(evaluatedAt)
            + " (waiting for a full metrics window since)");
      }
      out.append("<tr><td>").append(name.isEmpty() ? "" : "<strong>" + esc(name) + "</strong>");
      if (!id.isEmpty() && !id.equals(name)) { // tick events leave the id out when it is the name
        out.append(name.isEmpty() ? "" : "<br>").append("<span class=\"text-muted\" style=\"font-size:smaller\">")
            .append(esc(id)).append("</span>");
      }
      out.append("</td>")
          .append("<td>").append(pct(num(q.path("utilization")))).append("</td>")
          .append("<td>").append(fmt(num(q.path("backlog")))).append("</td>")
          .append("<td>").append(fmt(num(q.path("input_rate")))).append("</td>")
          .append("<td>").append(fmt(num(q.path("processed_rate")))).append("</td>")
          .append("<td>").append(fmt(num(q.path("arrival_rate")))).append("</td>")
          .append("<td>").append(fmt(num(q.path("required_slots")))).append("</td>")
          .append("<td>").append(esc(String.join("; ", notes))).append("</td></tr>");
    }
    out.append("</tbody></table>");
  }

  private static void decisions(StringBuilder out, JsonNode decisions, int limit) {
    out.append("<h4 style=\"margin-top:1.2em\">Decisions</h4>");
    if (!decisions.isArray() || decisions.isEmpty()) {
      out.append("<p>No decision yet: the autoscaler decides once a full metrics window was collected.</p>");
      return;
    }
    out.append("<p class=\"text-muted\">Newest first, the last ").append(limit)
        .append(" entries; consecutive decisions to do nothing are collapsed into one row.</p>")
        .append("<table class=\"table table-bordered table-sm\" id=\"sparkscale-decisions\">")
        .append("<thead><tr><th style=\"white-space:nowrap\">Time</th><th>Action</th><th>Executors</th>")
        .append("<th>Applied</th><th>Reason</th></tr></thead><tbody>");
    List<JsonNode> rows = new ArrayList<>();
    decisions.forEach(rows::add);
    int shown = 0;
    for (int i = rows.size() - 1; i >= 0 && shown < limit; i--, shown++) {
      JsonNode d = rows.get(i);
      String action = d.path("action").asText("?");
      boolean applied = d.path("applied").asBoolean(false);
      int count = d.path("count").asInt(1);
      String time = esc(clock(num(d.path("time"))));
      if (count > 1) {
        time = esc(clock(num(d.path("first_time")))) + " &ndash; " + time;
      }
      String style = "";
      if (!"none".equals(action)) {
        style = applied ? " style=\"background:" + ("scale_down".equals(action) ? "#deebf7" : "rollback".equals(action)
            ? "#fde0dd" : "#e5f5e0") + "\"" : " style=\"font-style:italic\"";
      }
      String actionText = esc(action) + (count > 1 ? " &times;" + count : "");
      String limited = d.path("limited_by").isTextual()
          ? " <span class=\"text-muted\">(limited by " + esc(d.path("limited_by").asText()) + ")</span>" : "";
      out.append("<tr class=\"sparkscale-decision sparkscale-").append(esc(action)).append("\"").append(style)
          .append("><td style=\"white-space:nowrap\">").append(time).append("</td>")
          .append("<td>").append(actionText).append("</td>")
          .append("<td style=\"white-space:nowrap\">").append(intText(d.path("from_executors"))).append(" &rarr; ")
          .append(intText(d.path("to_executors"))).append("</td>")
          .append("<td>").append("none".equals(action) ? "" : applied ? "yes" : "no (recommendation)").append("</td>")
          .append("<td>").append(esc(d.path("reason").asText(""))).append(limited).append("</td></tr>");
    }
    out.append("</tbody></table>");
  }

  /** Pauses, resumes, blocked scale-ups, errors and notices (the history page only), newest first. */
  private static void events(StringBuilder out, JsonNode events) {
    out.append("<h4 style=\"margin-top:1.2em\">Pauses, blocks and other events</h4>");
    if (!events.isArray() || events.isEmpty()) {
      out.append("<p>None.</p>");
      return;
    }
    out.append("<table class=\"table table-bordered table-sm\" id=\"sparkscale-events\">")
        .append("<thead><tr><th style=\"white-space:nowrap\">Time</th><th>Kind</th><th>Severity</th>")
        .append("<th>Reason</th></tr></thead><tbody>");
    List<JsonNode> rows = new ArrayList<>();
    events.forEach(rows::add);
    for (int i = rows.size() - 1, shown = 0; i >= 0 && shown < MAX_DECISIONS; i--, shown++) {
      JsonNode e = rows.get(i);
      String kind = e.path("kind").asText("?");
      String severity = e.path("severity").asText("info");
      String style = "error".equals(severity) || "pause".equals(kind) || "stopped".equals(kind)
          ? " style=\"background:#fde0dd\"" : "warning".equals(severity) ? " style=\"background:#fff3cd\"" : "";
      out.append("<tr class=\"sparkscale-event sparkscale-event-").append(esc(kind)).append("\"").append(style)
          .append("><td style=\"white-space:nowrap\">").append(esc(clock(num(e.path("time"))))).append("</td>")
          .append("<td>").append(esc(kind)).append("</td><td>").append(esc(severity)).append("</td>")
          .append("<td>").append(esc(e.path("reason").asText(""))).append("</td></tr>");
    }
    out.append("</tbody></table>");
  }

  // ---------------------------------------------------------------- helpers

  private static final String BADGE = "color:#fff;padding:1px 6px;border-radius:3px;";

  private static void item(StringBuilder out, String label, String html) {
    out.append("<li><strong>").append(esc(label)).append(":</strong> ").append(html).append("</li>");
  }

  private static String modeNote(String mode) {
    switch (mode) {
      case "autoscale":
        return "decisions are applied";
      case "recommend":
        return "decisions are published, never applied";
      case "reactive":
        return "the executor count is held at maxExecutors";
      default:
        return "unknown mode";
    }
  }

  /** HTML-escapes text for element content and quoted attribute values. */
  static String esc(String text) {
    if (text == null) {
      return "";
    }
    StringBuilder out = null;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      String rep;
      switch (c) {
        case '&': rep = "&amp;"; break;
        case '<': rep = "&lt;"; break;
        case '>': rep = "&gt;"; break;
        case '"': rep = "&quot;"; break;
        case '\'': rep = "&#39;"; break;
        default: rep = null;
      }
      if (rep != null && out == null) {
        out = new StringBuilder(text.length() + 16).append(text, 0, i);
      }
      if (out != null) {
        if (rep != null) {
          out.append(rep);
        } else {
          out.append(c);
        }
      }
    }
    return out == null ? text : out.toString();
  }

  /** A number, or NaN for null, missing, non-numeric. */
  static double num(JsonNode node) {
    return node != null && node.isNumber() ? node.asDouble() : Double.NaN;
  }

  static String intText(JsonNode node) {
    return node != null && node.isNumber() ? Long.toString(Math.round(node.asDouble())) : "&ndash;";
  }

  static String fmt(double v) {
    if (!Double.isFinite(v)) {
      return "&ndash;";
    }
    double a = Math.abs(v);
    String pattern = a >= 100 || v == Math.rint(v) ? "%.0f" : a >= 10 ? "%.1f" : "%.2f";
    return String.format(Locale.ROOT, pattern, v);
  }

  /** A number for an attribute: plain digits, no grouping, "" when unknown. */
  static String fmtPlain(double v) {
    return Double.isFinite(v) ? String.format(Locale.ROOT, "%.3f", v) : "";
  }

  static String pct(double v) {
    return Double.isFinite(v) ? String.format(Locale.ROOT, "%.0f %%", v * 100) : "&ndash;";
  }

  static String clock(double epochSeconds) {
    if (!Double.isFinite(epochSeconds)) {
      return "";
    }
    return CLOCK.format(Instant.ofEpochMilli(Math.round(epochSeconds * 1000)).atZone(ZoneId.systemDefault()));
  }

  static String dateClock(double epochSeconds) {
    return DATE_CLOCK.format(Instant.ofEpochMilli(Math.round(epochSeconds * 1000)).atZone(ZoneId.systemDefault()));
  }

  /** Field names of an object node, in document order. */
  static List<String> fieldNames(JsonNode node) {
    List<String> names = new ArrayList<>();
    if (node != null && node.isObject()) {
      for (Map.Entry<String, JsonNode> field : node.properties()) {
        names.add(field.getKey());
      }
    }
    return names;
  }
}
