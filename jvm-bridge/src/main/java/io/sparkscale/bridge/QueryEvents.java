package io.sparkscale.bridge;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;

import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Keeps the latest streaming-query events of every SparkSession of the driver (starts, progress, idle, terminations;
 * see {@link StreamingEvents}), numbered, for Python to read those after the last it read ({@link #after}). Bounded: a
 * reader that falls more than {@link #MAX_EVENTS} behind is told how many it missed. A listener of its own, beside
 * {@link SparkscaleListener} on the same queue: a reader waiting on its lock never holds up the scheduler events.
 */
public final class QueryEvents extends SparkListener {
  // A progress event a batch per query: at a batch a second for 100 queries, 10 s of them.
  static final int MAX_EVENTS = 1024;
  // The longest a reader may wait for a new event: py4j keeps a thread (and a connection) busy meanwhile.
  static final long MAX_WAIT_MS = 10_000L;

  private static final Logger LOG = LoggerFactory.getLogger(QueryEvents.class);

  private final LongSupplier clock; // epoch ms: when an event reached this listener
  private final ArrayDeque<Map<String, Object>> events = new ArrayDeque<>();
  private long last; // the number of the latest event (the first is 1)

  public QueryEvents() {
    this(System::currentTimeMillis);
  }

  QueryEvents(LongSupplier clock) {
    this.clock = clock;
  }

  @Override
  public void onOtherEvent(SparkListenerEvent event) {
    try {
      Map<String, Object> fields = StreamingEvents.fields(event, clock.getAsLong());
      if (fields != null) {
        add(fields);
      }
    } catch (ReflectiveOperationException | RuntimeException | LinkageError e) {
      // An event of another shape than the Spark lines read here is lost; the listener goes on.
      LOG.warn("could not read a streaming query event {}: {}", event.getClass().getName(), e.toString());
    }
  }

  /** Records one event: {@code fields} as {@link StreamingEvents#fields} gives them, numbered here. */
  synchronized void add(Map<String, Object> fields) {
    Map<String, Object> event = new LinkedHashMap<>();
    event.put("seq", ++last);
    event.putAll(fields);
    events.addLast(event);
    if (events.size() > MAX_EVENTS) {
      events.removeFirst();
    }
    notifyAll();
  }

  /**
   * The events numbered after {@code seen}, waiting up to {@code waitMs} (at most {@link #MAX_WAIT_MS}) for one when
   * there is none yet: {"last": the latest number, "missed": events gone before they were read, "events": [...]}.
   * A {@code seen} beyond {@code last} (a reader of an earlier listener) reads from the first.
   */
  synchronized Map<String, Object> after(long seen, long waitMs) throws InterruptedException {
    long from = seen > last ? 0 : Math.max(0, seen);
    long deadline = System.currentTimeMillis() + Math.min(Math.max(0, waitMs), MAX_WAIT_MS);
    while (last <= from) {
      long left = deadline - System.currentTimeMillis();
      if (left <= 0) {
        break;
      }
      wait(left);
    }
    List<Map<String, Object>> out = new ArrayList<>();
    long oldest = last - events.size() + 1;
    for (Map<String, Object> event : events) {
      if ((Long) event.get("seq") > from) {
        out.add(event);
      }
    }
    Map<String, Object> reply = new LinkedHashMap<>();
    reply.put("last", last);
    reply.put("missed", Math.max(0, oldest - from - 1));
    reply.put("events", out);
    return reply;
  }
}
