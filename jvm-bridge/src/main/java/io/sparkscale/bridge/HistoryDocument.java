package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.util.kvstore.KVStore;
import org.apache.spark.util.kvstore.KVStoreIterator;

/**
 * The History Server's Autoscaler page: rebuilds, from the {@link HistoryRecord}s of one application, the same
 * document Python publishes to the live tab (schema in sparkscale_listener/ui.py) and renders it with the same
 * {@link StatusPage}. Where the pieces come from:
 *
 * <ul>
 *   <li>the chart's timeline: the {@link AutoscalerTick} points; the summary: the last tick (executors, pause,
 *       utilization, queries) and the first tick's settings;</li>
 *   <li>the decision table: every {@link ScalingEvent} (applied actions, recommendations, rollbacks) and, from the
 *       ticks, the decisions to do nothing, collapsed into runs as on the live page;</li>
 *   <li>the events table (this page only): every {@link AutoscalerEvent} (pauses, resumes, blocks, errors).</li>
 * </ul>
 *
 * <p>The page is rebuilt only when the store holds a different number of records (an in-progress application
 * replayed again), so opening it twice costs one read of the store.
 */
final class HistoryDocument implements AutoscalerTab.Content {
  /** More points than the chart has pixels only slow the browser down; change points are always kept. */
  static final int MAX_POINTS = 1500;
  /** The live page keeps its last 100 decisions; a finished application shows this many. */
  static final int MAX_DECISIONS = 1000;

  private static final ObjectMapper LENIENT = JsonMapper.builder()
      .enable(JsonReadFeature.ALLOW_NON_NUMERIC_NUMBERS).build();

  private final KVStore store;
  private long renderedCount = -1;
  private String rendered;

  HistoryDocument(KVStore store) {
    this.store = store;
  }

  @Override
  public synchronized String html(long nowMs) {
    try {
      long count = store.count(HistoryRecord.class);
      if (count != renderedCount) {
        rendered = StatusPage.render(build(read()), 0, nowMs);
        renderedCount = count;
      }
      return rendered;
    } catch (Exception e) {
      throw new IllegalStateException("cannot read the autoscaler's events from the application store", e);
    }
  }

  private List<HistoryRecord> read() throws Exception {
    List<HistoryRecord> out = new ArrayList<>();
    // A closeable iterator: a disk store's iterator holds native resources until closed.
    try (KVStoreIterator<HistoryRecord> it = store.view(HistoryRecord.class).closeableIterator()) {
      while (it.hasNext()) {
        out.add(it.next());
      }
    }
    return out;
  }

  /** The document for these records, in {@code seq} order. */
  static ObjectNode build(List<HistoryRecord> records) {
    ArrayNode timeline = LENIENT.createArrayNode();
    List<ObjectNode> decisions = new ArrayList<>();
    ArrayNode events = LENIENT.createArrayNode();
    JsonNode config = null;
    JsonNode lastTick = null;
    JsonNode lastScalingEvent = null;
    ObjectNode lastScaling = null;
    long ticks = 0;
    long scalings = 0;
    long others = 0;
    int errors = 0;
    String lastError = null;
    double ended = Double.NaN;
    for (HistoryRecord r : records) {
      JsonNode e = parse(r.json());
      if (e == null) {
        continue;
      }
      switch (r.type()) {
        case HistoryRecord.TICK -> {
          ticks++;
          lastTick = e;
          JsonNode point = e.path("point");
          if (point.isObject() && Double.isFinite(StatusPage.num(point.path("t")))) {
            timeline.add(point);
          }
          if (config == null && e.path("config").size() > 0) {
            config = e.path("config");
          }
          addNone(decisions, point, e.path("decision"));
        }
        case HistoryRecord.SCALING -> {
          scalings++;
          lastScalingEvent = e;
          ObjectNode row = LENIENT.createObjectNode();
          double time = e.path("timestampMs").asDouble() / 1000;
          row.put("time", time).put("first_time", time).put("count", 1)
              .put("action", e.path("action").asText("?"))
              .set("from_executors", executors(e.path("fromExecutors")));
          row.set("to_executors", executors(e.path("toExecutors")));
          row.put("reason", e.path("reason").asText("")).put("applied", e.path("applied").asBoolean(false))
              .putNull("limited_by");
          decisions.add(row);
          if (row.path("applied").asBoolean()) {
            lastScaling = LENIENT.createObjectNode();
            lastScaling.put("action", row.path("action").asText()).put("time", time)
                .put("reason", row.path("reason").asText()).set("from_executors", v(row.path("from_executors")));
            lastScaling.set("to_executors", v(row.path("to_executors")));
          }
        }
        case HistoryRecord.EVENT -> {
          others++;
          ObjectNode row = LENIENT.createObjectNode();
          row.put("time", e.path("timestampMs").asDouble() / 1000).put("kind", e.path("kind").asText("?"))
              .put("severity", e.path("severity").asText("info")).put("reason", e.path("reason").asText(""));
          events.add(row);
          if ("error".equals(row.path("kind").asText())) {
            errors++;
            lastError = row.path("reason").asText();
          }
        }
        case HistoryRecord.END -> ended = e.path("timestampMs").asDouble() / 1000;
        default -> {
          // A record type of a newer bridge: ignored.
        }
      }
    }

    ObjectNode doc = LENIENT.createObjectNode();
    doc.put("version", 1);
    JsonNode point = lastTick == null ? LENIENT.createObjectNode() : lastTick.path("point");
    JsonNode tickStatus = lastTick == null ? LENIENT.createObjectNode() : lastTick.path("status");
    doc.set("published", v(point.path("t")));
    doc.set("config", config == null ? LENIENT.createObjectNode() : config);

    ObjectNode status = LENIENT.createObjectNode();
    String mode = tickStatus.path("mode").asText(lastScalingEvent == null ? "?"
        : lastScalingEvent.path("mode").asText("?"));
    status.put("mode", mode.isEmpty() ? "?" : mode);
    JsonNode target = point.path("target");
    if (!target.isNumber() && lastScaling != null) {
      target = lastScaling.path("to_executors"); // a log without tick summaries (an older bridge)
    }
    status.set("target_executors", v(target));
    status.set("live_executors", v(point.path("live")));
    status.set("pending_executors", v(tickStatus.path("pending_executors")));
    status.put("paused", tickStatus.path("paused").asBoolean(false))
        .put("stopped", tickStatus.path("stopped").asBoolean(false));
    status.set("pause_reason", v(tickStatus.path("pause_reason")));
    status.set("provisioning_time_s", v(tickStatus.path("provisioning_time_s")));
    ObjectNode lastDecision = LENIENT.createObjectNode();
    lastDecision.set("utilization", v(point.path("utilization")));
    status.set("last_decision", lastDecision);
    status.set("last_scaling", lastScaling);
    status.put("errors", errors);
    status.put("last_error", lastError);
    doc.set("status", status);
    doc.set("queries", lastTick == null ? LENIENT.createArrayNode() : v(lastTick.path("queries")));

    ArrayNode decisionArray = doc.putArray("decisions");
    List<ObjectNode> rows = ordered(decisions);
    rows.subList(Math.max(0, rows.size() - MAX_DECISIONS), rows.size()).forEach(decisionArray::add);
    doc.set("timeline", thin(timeline));
    doc.set("events", events);
    ObjectNode history = doc.putObject("history");
    history.put("ticks", ticks).put("scalings", scalings).put("events", others)
        .set("last_tick", v(point.path("t")));
    if (Double.isFinite(ended)) {
      history.put("ended", ended);
    } else {
      history.putNull("ended");
    }
    return doc;
  }

  /** A tick's run of decisions to do nothing, as a row of the table (none when it stands for no decision). */
  private static void addNone(List<ObjectNode> decisions, JsonNode point, JsonNode decision) {
    int count = decision.path("count").asInt(0);
    if (count <= 0 || !"none".equals(decision.path("action").asText("none"))) {
      return; // actions are in the ScalingEvents, with their full reasons
    }
    double time = decision.path("time").isNumber() ? decision.path("time").asDouble()
        : StatusPage.num(point.path("t"));
    JsonNode executors = decision.path("executors").isNumber() ? decision.path("executors") : point.path("target");
    ObjectNode row = LENIENT.createObjectNode();
    row.put("time", time).put("first_time", decision.path("first_time").asDouble(time)).put("count", count)
        .put("action", "none");
    row.set("from_executors", v(executors));
    row.set("to_executors", v(executors));
    row.put("reason", decision.path("reason").asText("")).put("applied", false);
    row.set("limited_by", v(decision.path("limited_by")));
    decisions.add(row);
  }

  /**
   * In time order (a tick event is posted after the scaling events of its tick, but its run of "none" decisions came
   * before them), with consecutive runs of "none" merged into one row, as on the live page.
   */
  static List<ObjectNode> ordered(List<ObjectNode> rows) {
    List<ObjectNode> sorted = new ArrayList<>(rows);
    sorted.sort(Comparator.comparingDouble(r -> r.path("first_time").asDouble(r.path("time").asDouble())));
    List<ObjectNode> out = new ArrayList<>();
    for (ObjectNode row : sorted) {
      ObjectNode last = out.isEmpty() ? null : out.get(out.size() - 1);
      if (last != null && "none".equals(last.path("action").asText()) && "none".equals(row.path("action").asText())) {
        int count = last.path("count").asInt() + row.path("count").asInt();
        last.put("time", row.path("time").asDouble()).put("count", count).put("reason", row.path("reason").asText());
        last.set("to_executors", row.path("to_executors"));
        last.set("limited_by", row.path("limited_by"));
      } else {
        out.add(row);
      }
    }
    return out;
  }

  /** At most about {@link #MAX_POINTS} points, keeping every one where the executors changed. */
  static ArrayNode thin(ArrayNode timeline) {
    int n = timeline.size();
    if (n <= MAX_POINTS) {
      return timeline;
    }
    int stride = (n + MAX_POINTS - 1) / MAX_POINTS;
    ArrayNode out = LENIENT.createArrayNode();
    JsonNode previous = null;
    for (int i = 0; i < n; i++) {
      JsonNode p = timeline.get(i);
      boolean changed = previous != null && (!p.path("live").equals(previous.path("live"))
          || !p.path("target").equals(previous.path("target")));
      if (i % stride == 0 || i == n - 1 || changed) {
        out.add(p);
      }
      previous = p;
    }
    return out;
  }

  /** A member that may be missing, as JSON null (a missing node has no place in a document). */
  private static JsonNode v(JsonNode value) {
    return value == null || value.isMissingNode() ? LENIENT.nullNode() : value;
  }

  /** -1 (the event's "unknown") as null, as in the live document. */
  private static JsonNode executors(JsonNode value) {
    return value.isNumber() && value.asInt() >= 0 ? value : LENIENT.nullNode();
  }

  private static JsonNode parse(String json) {
    try {
      JsonNode node = LENIENT.readTree(json);
      return node != null && node.isObject() ? node : null;
    } catch (JsonProcessingException e) {
      return null;
    }
  }
}
