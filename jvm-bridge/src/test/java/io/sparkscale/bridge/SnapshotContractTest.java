package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.InputStream;
import java.util.HashSet;
import java.util.Iterator;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.spark.SparkConf;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.junit.jupiter.api.Test;

/**
 * The JVM's side of the snapshot contract: the JSON Python receives has exactly the objects and fields that
 * snapshot-schema.json (packaged in the jar) declares, each of its declared type. Python's side is
 * tests/unit/collect/test_bridge_snapshot.py.
 */
class SnapshotContractTest {
  static final long T0 = 1_700_000_000_000L;
  private static final ObjectMapper JSON = new ObjectMapper();

  static JsonNode schema() throws IOException {
    try (InputStream in = SparkscaleListener.class.getResourceAsStream("snapshot-schema.json")) {
      assertTrue(in != null, "snapshot-schema.json is not on the classpath next to SparkscaleListener");
      return JSON.readTree(in);
    }
  }

  /** A snapshot in which every object of the schema occurs, with nullable fields both null and set. */
  static JsonNode everyObject() throws IOException {
    SparkscaleListener listener = new SparkscaleListener(new SparkConf(false));
    Events events = new Events(listener);
    events.executorAdded("1", 2, T0).executorAdded("2", 2, T0).executorRemoved("2", T0 + 10, "lost");
    Properties props = Events.microBatch("q", "0");
    StageInfo stage = Events.stage(1, 0, 2);
    events.jobStart(1, T0, props, stage).stageSubmitted(stage, props);
    TaskInfo done = events.taskStart(1, 1, 0, "1", T0);
    events.taskSucceeded(1, done, T0 + 5);
    Properties next = Events.microBatch("q", "1");
    StageInfo running = Events.stage(2, 0, 1);
    events.jobStart(2, T0, next, running).stageSubmitted(running, next); // batch 1: no task yet
    listener.readSourceOffsetsWith(() -> Map.of("q", Map.of("timeMs", T0 + 15, "offsets", 1234.0, "partitions", 8)));
    return JSON.readTree(SparkscaleBridge.toJson(listener.snapshot("app", T0 + 20)));
  }

  @Test
  void theSnapshotHasExactlyTheDeclaredFieldsOfTheDeclaredTypes() throws IOException {
    JsonNode schema = schema();
    JsonNode objects = schema.get("objects");
    Set<String> seen = new HashSet<>();
    Set<String> nullsSeen = new HashSet<>();
    check(everyObject(), schema.get("root").asText(), objects, "snapshot", seen, nullsSeen);
    assertEquals(names(objects), seen, "every declared object occurs in the test's snapshot");
    Set<String> nullable = new TreeSet<>();
    objects.fields().forEachRemaining(o -> o.getValue().fields().forEachRemaining(f -> {
      if (f.getValue().get("type").asText().endsWith("?")) {
        nullable.add(o.getKey() + "." + f.getKey());
      }
    }));
    assertEquals(nullable, new TreeSet<>(nullsSeen), "every nullable field occurs null at least once");
  }

  @Test
  void everyDeclaredFieldHasATypeAndAMeaning() throws IOException {
    JsonNode objects = schema().get("objects");
    for (Iterator<Map.Entry<String, JsonNode>> it = objects.fields(); it.hasNext(); ) {
      Map.Entry<String, JsonNode> object = it.next();
      object.getValue().fields().forEachRemaining(f -> {
        String where = object.getKey() + "." + f.getKey();
        String type = f.getValue().path("type").asText("");
        String base = type.replace("map of ", "").replace("table of ", "").replace("?", "");
        assertTrue(Set.of("integer", "number", "string").contains(base) || objects.has(base),
            where + ": unknown type '" + type + "'");
        assertTrue(!f.getValue().path("meaning").asText("").isBlank(), where + ": no meaning");
      });
    }
  }

  private static void check(JsonNode value, String object, JsonNode objects, String path, Set<String> seen,
                            Set<String> nullsSeen) {
    JsonNode fields = objects.get(object);
    assertTrue(value.isObject(), path + " is a " + object + " object");
    seen.add(object);
    assertEquals(names(fields), names(value), path + ": the fields of " + object);
    fields.fields().forEachRemaining(f -> {
      String type = f.getValue().get("type").asText();
      JsonNode v = value.get(f.getKey());
      String where = path + "." + f.getKey();
      if (v.isNull()) {
        assertTrue(type.endsWith("?"), where + " is null but declared " + type);
        nullsSeen.add(object + "." + f.getKey());
        return;
      }
      String base = type.endsWith("?") ? type.substring(0, type.length() - 1) : type;
      if (base.startsWith("map of ")) {
        assertTrue(v.isObject(), where + " is a map");
        v.fields().forEachRemaining(e -> check(e.getValue(), base.substring(7), objects, where + "[" + e.getKey() + "]",
            seen, nullsSeen));
      } else if (base.startsWith("table of ")) {
        String row = base.substring(9);
        assertTrue(v.isArray(), where + " is a table");
        v.forEach(r -> {
          assertTrue(r.isArray() && r.size() == 1 + objects.get(row).size() && r.get(0).isTextual(),
              where + ": a row is the id and one value per field of " + row + ": " + r);
          check(rowObject(r, objects.get(row)), row, objects, where + "[" + r.get(0).asText() + "]", seen, nullsSeen);
        });
      } else if (objects.has(base)) {
        check(v, base, objects, where, seen, nullsSeen);
      } else {
        switch (base) {
          case "integer" -> assertTrue(v.isIntegralNumber(), where + " is an integer: " + v);
          case "number" -> assertTrue(v.isNumber(), where + " is a number: " + v);
          case "string" -> assertTrue(v.isTextual(), where + " is a string: " + v);
          default -> fail(where + ": unknown type " + type);
        }
      }
    });
  }

  /** A table's row (the id, then the values in the declared order) as the object it stands for. */
  static ObjectNode rowObject(JsonNode row, JsonNode fields) {
    ObjectNode object = JSON.createObjectNode();
    Iterator<String> names = fields.fieldNames();
    for (int i = 1; names.hasNext(); i++) {
      object.set(names.next(), row.path(i));
    }
    return object;
  }

  /**
   * {@code snapshot} with its executors as a map of objects by id, as the tests read them: the values of each table
   * row put under their declared names.
   */
  static JsonNode withExecutorsById(JsonNode snapshot) throws IOException {
    JsonNode fields = schema().get("objects").get("ExecutorSnapshot");
    ObjectNode byId = JSON.createObjectNode();
    snapshot.get("executors").forEach(row -> byId.set(row.get(0).asText(), rowObject(row, fields)));
    ObjectNode copy = snapshot.deepCopy();
    copy.set("executors", byId);
    return copy;
  }

  private static Set<String> names(JsonNode node) {
    Set<String> out = new TreeSet<>();
    node.fieldNames().forEachRemaining(out::add);
    return out;
  }
}
