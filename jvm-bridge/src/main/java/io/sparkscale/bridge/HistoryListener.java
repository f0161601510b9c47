package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerApplicationEnd;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.status.ElementTrackingStore;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import scala.Tuple2;

/**
 * Listens to an event log being replayed by the History Server and keeps the autoscaler's events in the
 * application's store, one {@link HistoryRecord} each. The listener and the tab come from different plugin instances
 * (the History Server loads plugins anew for the replay and for the UI, and may replay long before the page is
 * opened, into a store on disk), so the store is the only thing they share.
 */
final class HistoryListener extends SparkListener {
  private static final Logger LOG = LoggerFactory.getLogger(HistoryListener.class);
  private static final ObjectMapper MAPPER = new ObjectMapper();

  private final ElementTrackingStore store;
  private long seq;

  HistoryListener(ElementTrackingStore store) {
    this.store = store;
  }

  /**
   * The History Server reads events with Spark's own Jackson mapper, whose Scala module turns the JSON objects and
   * arrays nested in our {@code Map<String, Object>} fields into Scala collections: they are made Java ones again
   * here, or plain Jackson would write them out as beans.
   */
  @Override
  public void onOtherEvent(SparkListenerEvent event) {
    if (event instanceof AutoscalerTick t) {
      write(HistoryRecord.TICK, new AutoscalerTick(object(t.point()), object(t.decision()), object(t.status()),
          list(t.queries()), object(t.config()), t.timestampMs(), t.liveOnly()));
    } else if (event instanceof ScalingEvent e) {
      write(HistoryRecord.SCALING, new ScalingEvent(e.action(), e.fromExecutors(), e.toExecutors(), e.reason(),
          e.applied(), e.mode(), object(e.details()), e.timestampMs()));
    } else if (event instanceof AutoscalerEvent e) {
      write(HistoryRecord.EVENT, new AutoscalerEvent(e.kind(), e.severity(), e.reason(), object(e.details()),
          e.timestampMs()));
    }
  }

  @Override
  public void onApplicationEnd(SparkListenerApplicationEnd event) {
    if (seq > 0) { // only for applications the autoscaler ran in: the others get no tab
      write(HistoryRecord.END, Map.of("timestampMs", event.time()));
    }
  }

  /** A JSON value with Java collections only: Scala maps and iterables (of any depth) converted. */
  static Object java(Object value) {
    if (value instanceof scala.collection.Map<?, ?> m) {
      Map<String, Object> out = new LinkedHashMap<>();
      for (scala.collection.Iterator<? extends Tuple2<?, ?>> it = m.iterator(); it.hasNext(); ) {
        Tuple2<?, ?> entry = it.next();
        out.put(String.valueOf(entry._1()), java(entry._2()));
      }
      return out;
    }
    if (value instanceof scala.collection.Iterable<?> items) {
      List<Object> out = new ArrayList<>();
      for (scala.collection.Iterator<?> it = items.iterator(); it.hasNext(); ) {
        out.add(java(it.next()));
      }
      return out;
    }
    if (value instanceof Map<?, ?> m) {
      Map<String, Object> out = new LinkedHashMap<>();
      m.forEach((k, v) -> out.put(String.valueOf(k), java(v)));
      return out;
    }
    if (value instanceof List<?> items) {
      List<Object> out = new ArrayList<>(items.size());
      items.forEach(v -> out.add(java(v)));
      return out;
    }
    return value;
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Object> object(Object value) {
    Object converted = java(value);
    return converted instanceof Map ? (Map<String, Object>) converted : null;
  }

  @SuppressWarnings("unchecked")
  private static List<Map<String, Object>> list(Object value) {
    Object converted = java(value);
    return converted instanceof List ? (List<Map<String, Object>>) converted : null;
  }

  private void write(String type, Object event) {
    try {
      store.write(new HistoryRecord(seq++, type, MAPPER.writeValueAsString(event)));
    } catch (JsonProcessingException e) {
      // One unreadable event must not stop the replay of the application's log.
      LOG.warn("sparkscale: skipped an autoscaler event of the event log: {}", e.toString());
    }
  }
}
