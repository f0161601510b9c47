package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.UUID;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.scheduler.SparkListenerEvent;
import org.junit.jupiter.api.Test;

import scala.Option;

/**
 * {@link QueryEvents} fed Spark's own streaming-query events (the classes of the Spark the suite runs on, made by
 * reflection: the bridge compiles without spark-sql), read back as Python reads them.
 */
class QueryEventsTest {
  static final long T0 = 1_700_000_000_000L;
  static final String EVENT = "org.apache.spark.sql.streaming.StreamingQueryListener$";
  static final UUID ID = UUID.fromString("11111111-1111-1111-1111-111111111111");
  static final UUID RUN = UUID.fromString("22222222-2222-2222-2222-222222222222");
  static final ObjectMapper JSON = new ObjectMapper();

  final QueryEvents events = new QueryEvents(() -> T0);

  static SparkListenerEvent make(String type, Class<?>[] types, Object... args) throws ReflectiveOperationException {
    return (SparkListenerEvent) Class.forName(EVENT + type).getConstructor(types).newInstance(args);
  }

  /**
   * A progress event's stand-in: Spark's own is made from a StreamingQueryProgress, whose constructor differs by line
   * and whose JSON reader needs Spark's Jackson (the suite has the bridge's older one). The accessors are Spark's.
   */
  public static final class ProgressEvent {
    private final String json;

    ProgressEvent(String json) {
      this.json = json;
    }

    public ProgressEvent progress() {
      return this;
    }

    public String json() {
      return json;
    }
  }

  void progress(String json) throws ReflectiveOperationException {
    events.add(StreamingEvents.fields(StreamingEvents.PROGRESS, new ProgressEvent(json), T0));
  }

  JsonNode read(long seen) throws Exception {
    return JSON.readTree(SparkscaleBridge.toJson(events.after(seen, 0)));
  }

  @Test
  void aQuerysStartProgressIdleAndEndAreKeptInOrderWithTheirFields() throws Exception {
    events.onOtherEvent(make("QueryStartedEvent", new Class<?>[] {UUID.class, UUID.class, String.class,
        String.class}, ID, RUN, "orders", "2026-12-02T10:00:00.000Z"));
    progress("{\"id\":\"" + ID + "\",\"runId\":\"" + RUN + "\",\"name\":\"orders\","
        + "\"timestamp\":\"2026-12-02T10:00:01.000Z\",\"batchId\":3,\"numInputRows\":10,\"sources\":[],"
        + "\"durationMs\":{\"triggerExecution\":500}}");
    events.onOtherEvent(make("QueryIdleEvent", new Class<?>[] {UUID.class, UUID.class, String.class}, ID, RUN,
        "2026-12-02T10:00:02.000Z"));
    events.onOtherEvent(make("QueryTerminatedEvent", new Class<?>[] {UUID.class, UUID.class, Option.class}, ID, RUN,
        Option.apply("boom")));

    JsonNode reply = read(0);
    assertEquals(4, reply.get("last").asLong());
    assertEquals(0, reply.get("missed").asLong());
    JsonNode all = reply.get("events");
    assertEquals(List.of("started", "progress", "idle", "terminated"),
        List.of(all.get(0).get("type").asText(), all.get(1).get("type").asText(), all.get(2).get("type").asText(),
            all.get(3).get("type").asText()));
    assertEquals("orders", all.get(0).get("name").asText());
    assertEquals(RUN.toString(), all.get(0).get("runId").asText());
    JsonNode batch = JSON.readTree(all.get(1).get("progress").asText());
    assertEquals(3, batch.get("batchId").asInt());
    assertEquals(500, batch.get("durationMs").get("triggerExecution").asInt());
    assertEquals(ID.toString(), all.get(2).get("id").asText());
    assertEquals("boom", all.get(3).get("exception").asText());
    assertEquals(T0, all.get(3).get("timeMs").asLong());
  }

  @Test
  void aReaderGetsOnlyWhatCameAfterTheLastItRead() throws Exception {
    for (int i = 0; i < 3; i++) {
      events.onOtherEvent(make("QueryIdleEvent", new Class<?>[] {UUID.class, UUID.class, String.class}, ID, RUN,
          "t" + i));
    }
    JsonNode reply = read(2);
    assertEquals(1, reply.get("events").size());
    assertEquals(3, reply.get("events").get(0).get("seq").asLong());
    assertEquals(0, read(3).get("events").size());
  }

  @Test
  void aReaderThatFellBehindIsToldHowManyItMissed() throws Exception {
    for (int i = 0; i < QueryEvents.MAX_EVENTS + 5; i++) {
      events.add(Map.of("type", "idle"));
    }
    JsonNode reply = read(0);
    assertEquals(5, reply.get("missed").asLong());
    assertEquals(QueryEvents.MAX_EVENTS, reply.get("events").size());
  }

  @Test
  void otherEventsAreNotKept() throws Exception {
    events.onOtherEvent(new AutoscalerEvent("notice", "info", "hello", null, T0));
    assertNull(StreamingEvents.fields(new AutoscalerEvent("notice", "info", "x", null, T0), T0));
    assertEquals(0, read(0).get("events").size());
  }

  @Test
  void aReaderWaitsForTheNextEventAndNoLonger() throws Exception {
    Thread later = new Thread(() -> {
      try {
        Thread.sleep(50);
      } catch (InterruptedException e) {
        return;
      }
      events.add(Map.of("type", "idle"));
    });
    later.start();
    Map<String, Object> reply = events.after(0, QueryEvents.MAX_WAIT_MS);
    later.join();
    assertEquals(1L, reply.get("last"));
    assertTrue(((List<?>) reply.get("events")).size() == 1);
  }
}
