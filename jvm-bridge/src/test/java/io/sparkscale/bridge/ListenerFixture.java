package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.SparkConf;
import org.junit.jupiter.api.BeforeEach;

/**
 * A listener fed synthetic scheduler events (see {@link Events}) and read through its snapshot as Python reads it
 * (JSON), for the listener's tests. Times are epoch ms from T0.
 */
abstract class ListenerFixture {
  static final long T0 = 1_700_000_000_000L;
  static final String Q1 = "11111111-1111-1111-1111-111111111111";
  static final String Q2 = "22222222-2222-2222-2222-222222222222";
  static final ObjectMapper JSON = new ObjectMapper();

  SparkscaleListener listener;
  Events events;

  @BeforeEach
  void setUp() {
    listener = new SparkscaleListener(new SparkConf(false).set("spark.executor.memory", "2g"));
    events = new Events(listener);
  }

  /** The snapshot at {@code atMs}, its executors by id (SnapshotContractTest checks the table they come in). */
  JsonNode snapshot(long atMs) {
    return byId(JSON.valueToTree(listener.snapshot("app-1", atMs)));
  }

  static JsonNode byId(JsonNode snapshot) {
    try {
      return SnapshotContractTest.withExecutorsById(snapshot);
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  static JsonNode executor(JsonNode snap, String id) {
    JsonNode e = snap.get("executors").get(id);
    assertTrue(e != null, "executor " + id + " in " + snap.get("executors"));
    return e;
  }

  static Set<String> fieldNames(JsonNode node) {
    Set<String> names = new java.util.TreeSet<>();
    node.fieldNames().forEachRemaining(names::add);
    return names;
  }
}
