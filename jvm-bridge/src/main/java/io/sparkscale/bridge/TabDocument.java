package io.sparkscale.bridge;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The Autoscaler tab's document, built from the autoscaler's listener events: one builder for the live tab (fed by
 * {@link AutoscalerTab}'s listener as the events arrive) and for the History Server (fed the same events replayed
 * from the event log, see {@link HistoryDocument}). The page's script renders it; its schema is
 * {@code $defs/document} in {@code autoscaler-tab.schema.json}, beside the script. Where the parts come from:
 *
 * <ul>
 *   <li>{@link AutoscalerTick}: the chart's timeline, the summary (the latest tick's executors, pause, utilization),
 *       the queries table, the settings (the first tick), and the runs of decisions to do nothing;</li>
 *   <li>{@link ScalingEvent}: the decision table's actions (applied, recommended, rolled back), with their
 *       prediction and outcome when the details carry them, and the summary's last scaling;</li>
 *   <li>{@link AutoscalerEvent}: the events table (pauses, resumes, blocks, errors).</li>
 * </ul>
 *
 * <p>A tick's {@code decision} stands for the decisions to do nothing since the previous <em>logged</em> tick, so the
 * event log loses none of them; the live tab sees every tick, each one repeating the run so far with a higher count.
 * A run is known by its {@code first_time}: a repeat updates the row instead of adding to it. A tick is posted after
 * the scaling events of its tick, while its run came before them: rows are kept in time order.
 *
 * <p>Not thread-safe by itself: the live tab's listener and page views synchronize on it.
 */
final class TabDocument {
  /** How much is kept: the live tab a window of recent ticks, the History Server the whole run, thinned to show. */
  record Limits(int points, boolean wholeRun, int decisions, int events) {
  }

  static final Limits LIVE = new Limits(720, false, 100, 100);
  static final Limits HISTORY = new Limits(1500, true, 1000, 1000);
  static final String SOURCE_LIVE = "live";
  static final String SOURCE_EVENT_LOG = "event-log";
  static final int VERSION = 2;

  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;

  /** The row a run of "none" decisions went into, and what of it this run accounts for. */
  private record OpenRun(double firstTime, int count, ObjectNode row) {
  }

  private final String source;
  private final Limits limits;
  private final ArrayDeque<ObjectNode> points = new ArrayDeque<>();
  private final List<ObjectNode> decisions = new ArrayList<>();
  private final ArrayDeque<ObjectNode> events = new ArrayDeque<>();
  private JsonNode config = NODES.objectNode();
  private JsonNode point = NODES.objectNode();
  private JsonNode tickStatus = NODES.objectNode();
  private JsonNode queries = NODES.arrayNode();
  private String scalingMode;
  private ObjectNode lastScaling;
  private OpenRun openRun;
  private long ticks;
  private long scalings;
  private long others;
  private int errorEvents;
  private String lastErrorEvent;
  private double ended = Double.NaN;
  private long changes;
  private long renderedChanges = -1;
  private String rendered;

  TabDocument(String source, Limits limits) {
    this.source = source;
    this.limits = limits;
  }

  /** Takes an autoscaler event; any other event is ignored. */
  void add(Object event) {
    if (event instanceof AutoscalerTick t) {
      tick(t);
    } else if (event instanceof ScalingEvent e) {
      scaling(e);
    } else if (event instanceof AutoscalerEvent e) {
      other(e);
    } else {
      return;
    }
    changes++;
  }

  /** The application ended (the History Server's page says when). */
  void ended(long timestampMs) {
    ended = timestampMs / 1000.0;
    changes++;
  }

  /** True once any autoscaler event arrived. */
  boolean isEmpty() {
    return ticks + scalings + others == 0;
  }

  // ---------------------------------------------------------------- events

  private void tick(AutoscalerTick t) {
    ticks++;
    ObjectNode p = MAPPER.valueToTree(t.point());
    JsonNode q = MAPPER.valueToTree(t.queries());
    queries = q.isArray() ? q : NODES.arrayNode();
    tickStatus = MAPPER.valueToTree(t.status());
    if (config.isEmpty() && !t.config().isEmpty()) {
      config = MAPPER.valueToTree(t.config());
    }
    if (Double.isFinite(num(p.path("t")))) {
      // The chart's per-query utilization lines come from the queries table of the same tick.
      ObjectNode perQuery = p.putObject("queries");
      for (JsonNode query : queries) {
        if (query.path("active").asBoolean(true) && query.path("utilization").isNumber()) {
          perQuery.set(label(query), query.path("utilization"));
        }
      }
      addPoint(p);
      point = p;
    }
    run(MAPPER.valueToTree(t.decision()), p);
  }

  private void scaling(ScalingEvent e) {
    scalings++;
    scalingMode = e.mode();
    double time = e.timestampMs() / 1000.0;
    JsonNode details = MAPPER.valueToTree(e.details());
    ObjectNode row = NODES.objectNode();
    row.put("time", time).put("first_time", time).put("count", 1).put("action", e.action())
        .set("from_executors", executors(e.fromExecutors()));
    row.set("to_executors", executors(e.toExecutors()));
    row.put("reason", e.reason()).put("applied", e.applied())
        .set("limited_by", details.path("limitedBy").isTextual() ? details.path("limitedBy") : NODES.nullNode());
    for (String part : new String[] {"prediction", "outcome"}) {
      if (details.path(part).isObject()) {
        row.set(part, details.path(part));
      }
    }
    if (details.path("suppressed").isNumber()) {
      row.set("suppressed", details.path("suppressed"));
    }
    insert(row);
    if (e.applied()) {
      lastScaling = NODES.objectNode();
      lastScaling.put("action", e.action()).put("time", time).put("reason", e.reason())
          .set("from_executors", executors(e.fromExecutors()));
      lastScaling.set("to_executors", executors(e.toExecutors()));
    }
  }

  private void other(AutoscalerEvent e) {
    others++;
    ObjectNode row = NODES.objectNode();
    row.put("time", e.timestampMs() / 1000.0).put("kind", e.kind()).put("severity", e.severity())
        .put("reason", e.reason());
    Object suppressed = e.details().get("suppressed");
    if (suppressed instanceof Number n) {
      row.put("suppressed", n.longValue());
    }
    events.addLast(row);
    while (events.size() > limits.events()) {
      events.removeFirst();
    }
    if ("error".equals(e.kind())) {
      errorEvents++;
      lastErrorEvent = e.reason();
    }
  }

  private void addPoint(ObjectNode p) {
    points.addLast(p);
    if (!limits.wholeRun()) {
      while (points.size() > limits.points()) {
        points.removeFirst();
      }
    }
  }

  /** A tick's run of decisions to do nothing (nothing when it stands for none). */
  private void run(JsonNode d, JsonNode p) {
    int count = d.path("count").asInt(0);
    if (count <= 0 || !"none".equals(d.path("action").asText("none"))) {
      return;
    }
    double time = d.path("time").isNumber() ? d.path("time").asDouble() : num(p.path("t"));
    double first = d.path("first_time").asDouble(time);
    JsonNode executors = d.path("executors").isNumber() ? d.path("executors") : p.path("target");
    if (openRun != null && openRun.firstTime() == first && containsRow(openRun.row())) {
      // The same run as the previous tick's, grown: the row takes the difference.
      ObjectNode row = openRun.row();
      row.put("count", row.path("count").asInt() + count - openRun.count());
      latest(row, d, time, executors);
      openRun = new OpenRun(first, count, row);
      return;
    }
    int at = insertionPoint(first);
    ObjectNode before = at > 0 ? decisions.get(at - 1) : null;
    ObjectNode after = at < decisions.size() ? decisions.get(at) : null;
    ObjectNode row;
    if (isNone(before)) { // consecutive runs are one row, as they are one stretch of steady state
      row = before;
      row.put("count", row.path("count").asInt() + count);
      if (time >= row.path("time").asDouble()) {
        latest(row, d, time, executors);
      }
    } else if (isNone(after)) {
      row = after;
      row.put("count", row.path("count").asInt() + count).put("first_time", first);
    } else {
      row = NODES.objectNode();
      row.put("time", time).put("first_time", first).put("count", count).put("action", "none");
      row.set("from_executors", value(executors));
      latest(row, d, time, executors);
      row.put("applied", false);
      decisions.add(at, row);
      trimDecisions();
    }
    openRun = new OpenRun(first, count, row);
  }

  private static void latest(ObjectNode row, JsonNode d, double time, JsonNode executors) {
    row.put("time", time).put("reason", d.path("reason").asText(""));
    row.set("to_executors", value(executors));
    row.set("limited_by", value(d.path("limited_by")));
  }

  private void insert(ObjectNode row) {
    decisions.add(insertionPoint(row.path("first_time").asDouble()), row);
    trimDecisions();
  }

  /** Where a row starting at {@code first} goes: after every row that started no later. */
  private int insertionPoint(double first) {
    int at = decisions.size();
    while (at > 0 && decisions.get(at - 1).path("first_time").asDouble() > first) {
      at--;
    }
    return at;
  }

  private boolean containsRow(ObjectNode row) {
    for (int i = decisions.size() - 1; i >= 0; i--) {
      if (decisions.get(i) == row) {
        return true;
      }
    }
    return false;
  }

  private void trimDecisions() {
    int excess = decisions.size() - limits.decisions();
    if (excess > 0) {
      decisions.subList(0, excess).clear();
    }
  }

  private static boolean isNone(ObjectNode row) {
    return row != null && "none".equals(row.path("action").asText());
  }

  // ---------------------------------------------------------------- the document

  /** The document as it stands (schema: {@code $defs/document} in autoscaler-tab.schema.json). */
  ObjectNode document() {
    ObjectNode doc = NODES.objectNode();
    doc.put("version", VERSION).put("source", source);
    doc.set("published", value(point.path("t")));
    doc.set("config", config);
    doc.set("status", status());
    doc.set("queries", queries);
    ArrayNode rows = doc.putArray("decisions");
    decisions.forEach(rows::add);
    ArrayNode list = doc.putArray("events");
    events.forEach(list::add);
    doc.set("timeline", timeline());
    ObjectNode counts = doc.putObject("counts");
    counts.put("ticks", ticks).put("scalings", scalings).put("events", others);
    if (Double.isFinite(ended)) {
      doc.put("ended", ended);
    } else {
      doc.putNull("ended");
    }
    return doc;
  }

  /** The document as JSON text; serialized again only after a change (an open live page asks once a tick). */
  String json() {
    if (renderedChanges != changes) {
      try {
        rendered = MAPPER.writeValueAsString(document());
      } catch (JsonProcessingException e) {
        throw new IllegalStateException("cannot serialize the Autoscaler tab's document", e);
      }
      renderedChanges = changes;
    }
    return rendered;
  }

  private ObjectNode status() {
    ObjectNode s = NODES.objectNode();
    String mode = tickStatus.path("mode").asText("");
    s.put("mode", !mode.isEmpty() ? mode : scalingMode != null && !scalingMode.isEmpty() ? scalingMode : "?");
    JsonNode target = point.path("target");
    if (!target.isNumber() && lastScaling != null) {
      target = lastScaling.path("to_executors"); // before the first tick that knew its target
    }
    s.set("target_executors", value(target));
    s.set("live_executors", value(point.path("live")));
    s.set("pending_executors", value(tickStatus.path("pending_executors")));
    s.set("waiting_for", value(tickStatus.path("waiting_for")));
    s.put("paused", tickStatus.path("paused").asBoolean(false))
        .put("stopped", tickStatus.path("stopped").asBoolean(false));
    s.set("pause_reason", value(tickStatus.path("pause_reason")));
    s.set("utilization", value(point.path("utilization")));
    s.set("provisioning_time_s", value(tickStatus.path("provisioning_time_s")));
    // The tick counts every error; the events table shows the ones not throttled as repeats.
    s.put("errors", Math.max(tickStatus.path("errors").asInt(0), errorEvents));
    JsonNode lastError = tickStatus.path("last_error");
    if (lastError.isTextual()) {
      s.set("last_error", lastError);
    } else {
      s.put("last_error", lastErrorEvent);
    }
    s.set("blocked_queries", tickStatus.path("blocked_queries").isObject()
        ? tickStatus.path("blocked_queries") : NODES.objectNode());
    s.set("last_scaling", lastScaling == null ? NODES.nullNode() : lastScaling);
    return s;
  }

  /** At most {@link Limits#points} points, keeping every one where the executors changed. */
  private ArrayNode timeline() {
    ArrayNode out = NODES.arrayNode();
    int n = points.size();
    int stride = (n + limits.points() - 1) / Math.max(1, limits.points());
    JsonNode previous = null;
    int i = 0;
    for (Iterator<ObjectNode> it = points.iterator(); it.hasNext(); i++) {
      JsonNode p = it.next();
      boolean changed = previous != null && (!p.path("live").equals(previous.path("live"))
          || !p.path("target").equals(previous.path("target")));
      if (stride <= 1 || i % stride == 0 || i == n - 1 || changed) {
        out.add(p);
      }
      previous = p;
    }
    return out;
  }

  // ---------------------------------------------------------------- helpers

  /** A query's name on the chart: its name, else the start of its id. */
  static String label(JsonNode query) {
    String name = query.path("name").isTextual() ? query.path("name").asText() : "";
    if (!name.isEmpty()) {
      return name;
    }
    String id = query.path("id").asText("?");
    return id.length() > 8 ? id.substring(0, 8) : id;
  }

  /** -1 (the event's "unknown") as null. */
  private static JsonNode executors(int n) {
    return n >= 0 ? NODES.numberNode(n) : NODES.nullNode();
  }

  /** A member that may be missing, as JSON null (a missing node has no place in a document). */
  private static JsonNode value(JsonNode v) {
    return v == null || v.isMissingNode() ? NODES.nullNode() : v;
  }

  static double num(JsonNode node) {
    return node != null && node.isNumber() ? node.asDouble() : Double.NaN;
  }
}
