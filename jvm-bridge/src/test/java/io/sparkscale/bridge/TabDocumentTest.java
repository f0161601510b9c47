package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.junit.jupiter.api.Test;

/**
 * The Autoscaler tab's document builder, fed synthetic listener events as Python posts them: the same run seen live
 * (every tick) and from the event log (only the ticks kept) gives the same decision table; every document conforms
 * to the schema the page's script reads.
 */
class TabDocumentTest {
  private static final ObjectMapper MAPPER = new ObjectMapper();
  private static final double T0 = 1_767_225_600.0;
  private static final JsonNode SCHEMA = schema();

  private static JsonNode schema() {
    try (InputStream in = TabDocument.class.getResourceAsStream("tab/autoscaler-tab.schema.json")) {
      return MAPPER.readTree(in);
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  private static Map<String, Object> object(String json) {
    try {
      return MAPPER.readValue(json, new TypeReference<LinkedHashMap<String, Object>>() { });
    } catch (Exception e) {
      throw new IllegalArgumentException(json, e);
    }
  }

  /** A tick as Python posts it: a point, the run of "none" since the last logged tick, a status and one query. */
  private static AutoscalerTick tick(double t, int live, int target, String run, boolean logged, String status) {
    Map<String, Object> point = object("{\"t\": " + t + ", \"live\": " + live + ", \"target\": " + target
        + ", \"input_rate\": 100.0, \"processed_rate\": 95.5, \"arrival_rate\": 101.0, \"backlog\": 40.0,"
        + " \"utilization\": 0.8}");
    List<Map<String, Object>> queries = List.of(object("{\"name\": \"orders\", \"backlog\": 40.0, \"input_rate\":"
        + " 100.0, \"processed_rate\": 95.5, \"arrival_rate\": 101.0, \"utilization\": 0.8, \"required_slots\": 2.5,"
        + " \"id\": \"0f1e2d3c-aaaa\"}"));
    Map<String, Object> config = t == T0 ? object("{\"interval_s\": 2, \"min_executors\": 1, \"max_executors\": 4,"
        + " \"utilization_max\": 0.9, \"utilization_target\": 0.7}") : null;
    return new AutoscalerTick(point, object(run), object(status), new ArrayList<>(queries), config,
        Math.round(t * 1000), !logged);
  }

  private static String run(int count, double first, double last) {
    return count == 0 ? "{\"action\": \"none\", \"count\": 0}"
        : "{\"action\": \"none\", \"count\": " + count + ", \"first_time\": " + first + ", \"time\": " + last
        + ", \"executors\": 1, \"reason\": \"within the band\"}";
  }

  private static final String RUNNING = "{\"mode\": \"autoscale\", \"pending_executors\": 0}";

  /**
   * Twelve ticks 2 s apart, logged every 10 s and at the scale-up (tick 6, which posts its ScalingEvent first), as
   * Python's TickSummaries keeps them; each tick's run counts the "none" decisions since the last logged tick.
   */
  private static List<Object> events(boolean live) {
    List<Object> out = new ArrayList<>();
    int count = 0;
    double first = 0;
    double lastLogged = -1;
    int target = 1;
    for (int i = 0; i < 12; i++) {
      double t = T0 + 2 * i;
      if (i == 6) {
        target = 2;
        Map<String, Object> details = object("{\"mode\": \"autoscale\", \"limitedBy\": \"maxExecutors\","
            + " \"prediction\": {\"throughput\": 180.5, \"batchTimeS\": 4.25, \"drainS\": 30},"
            + " \"outcome\": {\"throughput\": 171.0, \"batchTimeS\": 4.9}}");
        out.add(new ScalingEvent("scale_up", 1, 2, "backlog grows", true, "autoscale", details,
            Math.round(t * 1000) + 5));
      } else {
        if (count == 0) {
          first = t;
        }
        count++;
      }
      boolean logged = lastLogged < 0 || i == 6 || t - lastLogged >= 10;
      if (logged || live) {
        out.add(tick(t, 1, target, run(count, first, t), logged, RUNNING));
      }
      if (logged) {
        lastLogged = t;
        count = 0;
      }
    }
    return out;
  }

  private static TabDocument built(String source, TabDocument.Limits limits, List<Object> events) {
    TabDocument document = new TabDocument(source, limits);
    events.forEach(document::add);
    return document;
  }

  private static List<String> rows(JsonNode document) {
    List<String> out = new ArrayList<>();
    for (JsonNode d : document.path("decisions")) {
      out.add(String.format(java.util.Locale.ROOT, "%s x%d %.3f..%.3f", d.path("action").asText(),
          d.path("count").asInt(), d.path("first_time").asDouble() - T0, d.path("time").asDouble() - T0));
    }
    return out;
  }

  @Test
  void theLiveTabAndTheEventLogGiveTheSameDecisionTable() {
    JsonNode live = built(TabDocument.SOURCE_LIVE, TabDocument.LIVE, events(true)).document();
    JsonNode log = built(TabDocument.SOURCE_EVENT_LOG, TabDocument.HISTORY, events(false)).document();
    // Six "none" before the scale-up at 12 s (0..10), five after it (14..22): no decision lost or counted twice.
    List<String> expected = List.of("none x6 0.000..10.000", "scale_up x1 12.005..12.005", "none x5 14.000..22.000");
    assertEquals(expected, rows(live));
    assertEquals(expected, rows(log));
    assertEquals(12, live.path("timeline").size());
    assertEquals(4, log.path("timeline").size()); // 0, 10 (due), 12 (the scale-up), 22 (due)
    assertEquals(12, live.path("counts").path("ticks").asInt());
    assertEquals("live", live.path("source").asText());
    assertEquals("event-log", log.path("source").asText());
    assertConforms(live);
    assertConforms(log);
  }

  @Test
  void aDecisionCarriesItsPredictionAndOutcome() {
    JsonNode doc = built(TabDocument.SOURCE_LIVE, TabDocument.LIVE, events(true)).document();
    JsonNode up = doc.path("decisions").get(1);
    assertEquals("maxExecutors", up.path("limited_by").asText());
    assertEquals(4.25, up.path("prediction").path("batchTimeS").asDouble());
    assertEquals(171.0, up.path("outcome").path("throughput").asDouble());
    assertFalse(doc.path("decisions").get(0).has("prediction"));
    JsonNode last = doc.path("status").path("last_scaling");
    assertEquals(2, last.path("to_executors").asInt());
    assertEquals("backlog grows", last.path("reason").asText());
  }

  @Test
  void theSummaryComesFromTheLatestTickAndTheEvents() {
    List<Object> events = new ArrayList<>(events(true));
    events.add(new AutoscalerEvent("error", "error", "collect failed: boom", Map.of("suppressed", 3), 1000));
    events.add(tick(T0 + 30, 2, 2, run(0, 0, 0), true, "{\"mode\": \"autoscale\", \"pending_executors\": 0,"
        + " \"paused\": true, \"pause_reason\": \"checker taskFailures\", \"errors\": 4, \"blocked_queries\":"
        + " {\"0f1e2d3c-aaaa\": \"scale-up did not help\"}}"));
    JsonNode doc = built(TabDocument.SOURCE_LIVE, TabDocument.LIVE, events).document();
    JsonNode status = doc.path("status");
    assertEquals(2, status.path("live_executors").asInt());
    assertTrue(status.path("paused").asBoolean());
    assertEquals("checker taskFailures", status.path("pause_reason").asText());
    assertEquals(4, status.path("errors").asInt()); // the tick's count: the events table has the unthrottled ones
    assertEquals("collect failed: boom", status.path("last_error").asText());
    assertEquals("scale-up did not help", status.path("blocked_queries").path("0f1e2d3c-aaaa").asText());
    assertEquals(0.8, status.path("utilization").asDouble());
    assertEquals(3, doc.path("events").get(0).path("suppressed").asInt());
    assertEquals(0.8, doc.path("timeline").get(0).path("queries").path("orders").asDouble());
    assertEquals(4, doc.path("config").path("max_executors").asInt());
    assertConforms(doc);
  }

  @Test
  void theLiveTabKeepsRecentPointsAndTheHistoryThinsTheWholeRunKeepingChanges() {
    TabDocument live = new TabDocument(TabDocument.SOURCE_LIVE, TabDocument.LIVE);
    TabDocument history = new TabDocument(TabDocument.SOURCE_EVENT_LOG, TabDocument.HISTORY);
    for (int i = 0; i < 5000; i++) {
      int executors = i == 2501 ? 3 : 2; // one tick with another count: a change kept whatever the thinning
      AutoscalerTick t = tick(T0 + 10 * i, executors, executors, run(0, 0, 0), true, RUNNING);
      live.add(t);
      history.add(t);
    }
    JsonNode recent = live.document().path("timeline");
    assertEquals(TabDocument.LIVE.points(), recent.size());
    assertEquals(T0 + 10 * 4999, recent.get(recent.size() - 1).path("t").asDouble());
    JsonNode whole = history.document().path("timeline");
    assertTrue(whole.size() <= TabDocument.HISTORY.points() + 4, "thinned: " + whole.size());
    assertEquals(T0, whole.get(0).path("t").asDouble());
    assertEquals(T0 + 10 * 4999, whole.get(whole.size() - 1).path("t").asDouble());
    boolean changeKept = false;
    for (JsonNode p : whole) {
      changeKept |= p.path("live").asInt() == 3;
    }
    assertTrue(changeKept, "the point where the executors changed is kept");
  }

  @Test
  void onlyTheTicksKeptReachTheEventLogAndTheFlagStaysOutOfIt() throws Exception {
    AutoscalerTick kept = tick(T0, 1, 1, run(1, T0, T0), true, RUNNING);
    AutoscalerTick liveOnly = tick(T0 + 2, 1, 1, run(1, T0, T0), false, RUNNING);
    assertTrue(kept.logEvent());
    assertFalse(liveOnly.logEvent());
    String json = MAPPER.writeValueAsString(kept);
    assertFalse(json.contains("liveOnly") || json.contains("logEvent"), json);
    assertTrue(MAPPER.writeValueAsString(liveOnly).contains("\"liveOnly\":true"));
    // The History Server's path: the record written by HistoryListener, read back and fed to the builder.
    TabDocument document = new TabDocument(TabDocument.SOURCE_EVENT_LOG, TabDocument.HISTORY);
    HistoryDocument.add(document, new HistoryRecord(0, HistoryRecord.TICK, json));
    HistoryDocument.add(document, new HistoryRecord(1, HistoryRecord.END, "{\"timestampMs\": 1767225700000}"));
    HistoryDocument.add(document, new HistoryRecord(2, "a-newer-type", "{}"));
    JsonNode doc = MAPPER.readTree(document.json());
    assertEquals(1, doc.path("timeline").size());
    assertEquals(1_767_225_700.0, doc.path("ended").asDouble());
    assertConforms(doc);
  }

  @Test
  void thePageEmbedsTheDocumentAsDataThatNoTextCanBreakOutOf() {
    String hostile = "q<script>alert(\"x'1\")</script>&amp;<!--";
    AutoscalerTick t = new AutoscalerTick(object("{\"t\": " + T0 + ", \"live\": 1, \"target\": 1}"),
        object(run(0, 0, 0)), object(RUNNING), List.of(Map.<String, Object>of("name", hostile)), null, 0, false);
    TabDocument document = new TabDocument(TabDocument.SOURCE_LIVE, TabDocument.LIVE);
    document.add(t);
    AutoscalerTab.Content content = new AutoscalerTab.Content() {
      @Override
      public String json() {
        return document.json();
      }

      @Override
      public boolean live() {
        return true;
      }
    };
    String html = PageFrame.body(content, "/static/d3.min.js", "n0nce", 1000);
    assertFalse(html.contains(hostile) || html.contains("<script>alert") || html.contains("<!--"), html);
    String open = "id=\"sparkscale-document\">";
    String data = html.substring(html.indexOf(open) + open.length(), html.indexOf("</script>"));
    assertEquals(hostile, readTree(data).path("queries").get(0).path("name").asText());
    assertTrue(html.contains("<script src=\"/static/d3.min.js\" nonce=\"n0nce\"></script>"));
    assertTrue(html.contains("data-source=\"live\" data-server-ms=\"1000\""));
    // The script's modules and the stylesheet go inline: nothing in them may close their element.
    assertFalse(PageFrame.Assets.CSS.contains("</"));
    PageFrame.Assets.SCRIPTS.forEach((name, text) -> assertFalse(text.contains("</") || text.contains("<!--"), name));
  }

  @Test
  void thePageInlinesEveryScriptModuleInItsDeclaredOrder() throws Exception {
    AutoscalerTab.Content content = new AutoscalerTab.Content() {
      @Override
      public String json() {
        return null;
      }

      @Override
      public boolean live() {
        return false;
      }
    };
    String html = PageFrame.body(content, "/static/d3.min.js", "n0nce", 1000);
    int at = html.indexOf("<script src=\"/static/d3.min.js\"");
    for (String name : PageFrame.SCRIPT_MODULES) {
      // After d3 and the module before it, each in its own element with the nonce.
      int next = html.indexOf("<script nonce=\"n0nce\">" + PageFrame.Assets.SCRIPTS.get(name), at);
      assertTrue(next > at, name);
      at = next;
    }
    assertEquals(PageFrame.SCRIPT_MODULES.size(), html.split("<script nonce=\"n0nce\">", -1).length - 1);
    // A script file beside them that the list leaves out would never reach the page.
    Path folder = Path.of(PageFrame.class.getResource("tab/format.js").toURI()).getParent();
    try (Stream<Path> files = Files.list(folder)) {
      Set<String> scripts = files.map((f) -> f.getFileName().toString()).filter((f) -> f.endsWith(".js"))
          .collect(Collectors.toCollection(TreeSet::new));
      assertEquals(new TreeSet<>(PageFrame.SCRIPT_MODULES), scripts);
    }
  }

  private static JsonNode readTree(String json) {
    try {
      return MAPPER.readTree(json);
    } catch (Exception e) {
      throw new IllegalArgumentException(json, e);
    }
  }

  @Test
  void theSchemaCheckFindsWhatDoesNotConform() {
    JsonNode doc = built(TabDocument.SOURCE_LIVE, TabDocument.LIVE, events(true)).document();
    ((com.fasterxml.jackson.databind.node.ObjectNode) doc.path("status")).put("utilisation", 1);
    ((com.fasterxml.jackson.databind.node.ObjectNode) doc.path("counts")).remove("ticks");
    ((com.fasterxml.jackson.databind.node.ObjectNode) doc.path("timeline").get(0)).put("live", "one");
    List<String> errors = new ArrayList<>();
    check(doc, SCHEMA.path("$defs").path("document"), "document", errors);
    assertEquals(3, errors.size(), errors.toString());
  }

  // ---------------------------------------------------------------- the schema (the keywords it uses)

  private static void assertConforms(JsonNode document) {
    List<String> errors = new ArrayList<>();
    check(document, SCHEMA.path("$defs").path("document"), "document", errors);
    assertEquals(List.of(), errors);
  }

  private static void check(JsonNode value, JsonNode schema, String where, List<String> errors) {
    if (schema.has("$ref")) {
      String ref = schema.path("$ref").asText();
      check(value, SCHEMA.path("$defs").path(ref.substring(ref.lastIndexOf('/') + 1)), where, errors);
      return;
    }
    JsonNode types = schema.path("type");
    if (!types.isMissingNode()) {
      boolean ok = false;
      for (JsonNode type : types.isArray() ? types : MAPPER.createArrayNode().add(types)) {
        ok |= switch (type.asText()) {
          case "object" -> value.isObject();
          case "array" -> value.isArray();
          case "string" -> value.isTextual();
          case "boolean" -> value.isBoolean();
          case "null" -> value.isNull();
          case "integer" -> value.isIntegralNumber();
          case "number" -> value.isNumber();
          default -> throw new IllegalStateException("type " + type);
        };
      }
      if (!ok) {
        errors.add(where + ": " + value + " is not of type " + types);
        return;
      }
    }
    if (schema.has("enum")) {
      boolean found = false;
      for (JsonNode allowed : schema.path("enum")) {
        found |= allowed.equals(value) || allowed.isNumber() && value.isNumber()
            && allowed.asDouble() == value.asDouble();
      }
      if (!found) {
        errors.add(where + ": " + value + " is not one of " + schema.path("enum"));
      }
    }
    if (schema.has("minimum") && value.isNumber() && value.asDouble() < schema.path("minimum").asDouble()) {
      errors.add(where + ": " + value + " is below " + schema.path("minimum"));
    }
    if (value.isObject()) {
      for (JsonNode required : schema.path("required")) {
        if (!value.has(required.asText())) {
          errors.add(where + ": " + required + " is missing");
        }
      }
      JsonNode extra = schema.path("additionalProperties");
      value.fieldNames().forEachRemaining(key -> {
        JsonNode declared = schema.path("properties").path(key);
        if (!declared.isMissingNode()) {
          check(value.path(key), declared, where + "." + key, errors);
        } else if (extra.isBoolean() && !extra.asBoolean()) {
          errors.add(where + ": \"" + key + "\" is not declared");
        } else if (extra.isObject()) {
          check(value.path(key), extra, where + "." + key, errors);
        }
      });
    }
    if (value.isArray() && schema.has("items")) {
      for (int i = 0; i < value.size(); i++) {
        check(value.get(i), schema.path("items"), where + "[" + i + "]", errors);
      }
    }
  }

  @Test
  void theSchemaIsReadable() {
    assertNotNull(SCHEMA.path("$defs").path("tick").path("properties").get("point"));
  }
}
