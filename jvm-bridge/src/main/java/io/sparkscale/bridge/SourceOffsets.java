package io.sparkscale.bridge;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The latest offsets of the streaming queries' Kafka sources, read between micro-batches.
 *
 * <p>Why: a Kafka source whose read limit does not bind reads everything waiting when a batch starts, so its
 * progress reports no lag, and what arrived shows only when the batch that read it completes. A rise in the arrivals
 * then takes two batches to confirm, and the first of them, sized for the load before, can run several trigger
 * intervals. The sum of the latest offsets of the partitions a query reads, taken every second, tells the arrivals
 * between batches.
 *
 * <p>How: Python registers each active query (its JVM {@code StreamingQuery}) once. A daemon thread, every
 * {@link #PERIOD_MS} ms, finds the query's sources; when every one is Spark's Kafka micro-batch stream it asks the
 * brokers for the latest offsets of the partitions the stream last planned, through a Kafka {@code Admin} client of
 * its own made from the source's driver-side Kafka parameters (the same servers and security settings Spark uses;
 * one client for all the sources with the same parameters, less the consumer group Spark names per query).
 * Kafka's classes are reached by reflection through the stream's class loader: the bridge does not depend on the
 * connector, which an application may not have. A query whose reading fails keeps its last one, which tells no new
 * arrivals (the failure is said once in the log); nothing here runs on the listener's or the query's threads.
 */
final class SourceOffsets implements AutoCloseable {
  static final long PERIOD_MS = 1000L;
  private static final long REQUEST_TIMEOUT_MS = 2000L;
  static final String KAFKA_STREAM = "org.apache.spark.sql.kafka010.KafkaMicroBatchStream";
  private static final Logger LOG = LoggerFactory.getLogger(SourceOffsets.class);
  private static final ObjectMapper JSON = new ObjectMapper();

  /** One reading: when it was taken, the sum of the latest offsets, over how many partitions. */
  record Reading(long timeMs, double offsets, int partitions) {
  }

  /** A registered query and what its readings need. Touched by the reading thread only, except {@code reading}. */
  private static final class Watched {
    final Object query;
    List<Object> streams; // its Kafka streams, once its sources are known
    String problem; // the last failure logged (each new one is logged once)
    volatile Reading reading;

    Watched(Object query) {
      this.query = query;
    }
  }

  private final ConcurrentHashMap<String, Watched> watched = new ConcurrentHashMap<>();
  // Admin clients by the parameters they were made from: used by the reading thread only, closed with this.
  private final Map<Map<String, Object>, Object> admins = new HashMap<>();
  private ScheduledExecutorService thread;

  /** Reads the latest offsets of the query's sources from now on (again, for a restarted query). */
  synchronized void watch(String queryId, Object streamingQuery) {
    watched.put(queryId, new Watched(streamingQuery));
    if (thread == null) {
      thread = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "sparkscale-source-offsets");
        t.setDaemon(true);
        return t;
      });
      thread.scheduleWithFixedDelay(this::readAll, 0L, PERIOD_MS, TimeUnit.MILLISECONDS);
    }
  }

  /** The latest reading of each query that has one: {query id: {timeMs, offsets, partitions}}. */
  Map<String, Object> readings() {
    Map<String, Object> out = new LinkedHashMap<>();
    watched.forEach((id, w) -> {
      Reading r = w.reading;
      if (r != null) {
        Map<String, Object> x = new LinkedHashMap<>();
        x.put("timeMs", r.timeMs());
        x.put("offsets", r.offsets());
        x.put("partitions", r.partitions());
        out.put(id, x);
      }
    });
    return out;
  }

  @Override
  public synchronized void close() {
    if (thread != null) {
      thread.shutdownNow();
      try {
        thread.awaitTermination(REQUEST_TIMEOUT_MS, TimeUnit.MILLISECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      thread = null;
    }
    watched.clear();
    for (Object admin : admins.values()) {
      try {
        admin.getClass().getMethod("close", Duration.class).invoke(admin, Duration.ofSeconds(1));
      } catch (ReflectiveOperationException | RuntimeException e) {
        // Closing is best effort: the client's threads are daemons.
      }
    }
    admins.clear();
  }

  private void readAll() {
    for (Map.Entry<String, Watched> e : watched.entrySet()) {
      Watched w = e.getValue();
      try {
        if (!Boolean.TRUE.equals(call(w.query, "isActive"))) {
          watched.remove(e.getKey(), w);
          continue;
        }
        Reading r = read(w);
        if (r != null) {
          w.reading = r;
          w.problem = null;
        }
      } catch (Exception | LinkageError failure) {
        Throwable cause = failure instanceof InvocationTargetException ite && ite.getCause() != null
            ? ite.getCause() : failure;
        if (cause instanceof InterruptedException) {
          return; // closing
        }
        // The broker may be down or the connector of another version: no reading, and the query goes on.
        String problem = cause.toString();
        if (!problem.equals(w.problem)) {
          LOG.warn("sparkscale: no latest offsets for query {}: {}", e.getKey(), problem);
          w.problem = problem;
        }
      }
    }
  }

  /** A reading of the query's Kafka sources now; null while a source has planned no batch yet, or is not Kafka. */
  private Reading read(Watched w) throws ReflectiveOperationException {
    if (w.streams == null) {
      List<Object> streams = new ArrayList<>();
      Object sources = call(call(w.query, "streamingQuery"), "sources");
      scala.collection.Iterator<?> it = ((scala.collection.Iterable<?>) sources).iterator();
      while (it.hasNext()) {
        streams.add(it.next());
      }
      if (streams.isEmpty()) {
        return null; // the query has not built its plan yet
      }
      for (Object s : streams) {
        if (!KAFKA_STREAM.equals(s.getClass().getName())) {
          // Only Kafka is read between batches; other sources keep what their progress tells.
          streams.clear();
          break;
        }
      }
      w.streams = streams;
    }
    if (w.streams.isEmpty()) {
      return null;
    }
    double sum = 0.0;
    int partitions = 0;
    long asked = System.currentTimeMillis();
    for (Object stream : w.streams) {
      Object planned = call(stream, "reportLatestOffset");
      if (planned == null) {
        return null;
      }
      Map<String, Long> latest = latestOffsets(stream, (String) call(planned, "json"));
      for (long offset : latest.values()) {
        sum += offset;
      }
      partitions += latest.size();
    }
    // The brokers answered some time between the two: the middle is the reading's time.
    return new Reading((asked + System.currentTimeMillis()) / 2, sum, partitions);
  }

  /** The latest offset of each partition in {@code plannedJson} ({"topic": {"partition": offset}}), by partition. */
  private Map<String, Long> latestOffsets(Object stream, String plannedJson)
      throws ReflectiveOperationException {
    ClassLoader loader = stream.getClass().getClassLoader();
    Class<?> adminClass = Class.forName("org.apache.kafka.clients.admin.Admin", true, loader);
    @SuppressWarnings("unchecked")
    Map<String, Object> params = new HashMap<>(
        (Map<String, Object>) call(call(stream, "kafkaOffsetReader"), "driverKafkaParams"));
    params.remove("group.id"); // Spark names one per query; an admin client has no use for it
    Object admin = admins.get(params);
    if (admin == null) {
      Map<String, Object> named = new HashMap<>(params);
      named.put("client.id", "sparkscale-offsets-" + (admins.size() + 1));
      admin = adminClass.getMethod("create", Map.class).invoke(null, named);
      admins.put(params, admin);
    }
    Class<?> partitionClass = Class.forName("org.apache.kafka.common.TopicPartition", true, loader);
    Object latestSpec = Class.forName("org.apache.kafka.clients.admin.OffsetSpec", true, loader)
        .getMethod("latest").invoke(null);
    Map<Object, Object> request = new HashMap<>();
    JsonNode planned = readTree(plannedJson);
    for (Iterator<Map.Entry<String, JsonNode>> topics = planned.fields(); topics.hasNext(); ) {
      Map.Entry<String, JsonNode> topic = topics.next();
      for (Iterator<String> ps = topic.getValue().fieldNames(); ps.hasNext(); ) {
        request.put(partitionClass.getConstructor(String.class, int.class)
            .newInstance(topic.getKey(), Integer.parseInt(ps.next())), latestSpec);
      }
    }
    Object result = adminClass.getMethod("listOffsets", Map.class).invoke(admin, request);
    Object future = call(result, "all");
    Map<?, ?> answered = (Map<?, ?>) Class.forName("org.apache.kafka.common.KafkaFuture", true, loader)
        .getMethod("get", long.class, TimeUnit.class).invoke(future, REQUEST_TIMEOUT_MS, TimeUnit.MILLISECONDS);
    Map<String, Long> out = new HashMap<>();
    for (Map.Entry<?, ?> e : answered.entrySet()) {
      out.put(e.getKey().toString(), (Long) call(e.getValue(), "offset"));
    }
    return out;
  }

  private static JsonNode readTree(String json) {
    try {
      return JSON.readTree(json);
    } catch (java.io.IOException e) {
      throw new IllegalStateException("unreadable offsets " + json, e);
    }
  }

  /** {@code target.name()} of a public method, found on the target's class or the interfaces it implements. */
  static Object call(Object target, String name) throws ReflectiveOperationException {
    Method m = publicMethod(target.getClass(), name);
    return m.invoke(target);
  }

  private static Method publicMethod(Class<?> type, String name) throws NoSuchMethodException {
    // A method of a non-public class (a Kafka or Spark implementation) is invoked through the public type declaring it.
    for (Class<?> c = type; c != null; c = c.getSuperclass()) {
      if (java.lang.reflect.Modifier.isPublic(c.getModifiers())) {
        try {
          return c.getMethod(name);
        } catch (NoSuchMethodException ignored) {
          // look further up
        }
      }
      for (Class<?> i : c.getInterfaces()) {
        try {
          return i.getMethod(name);
        } catch (NoSuchMethodException ignored) {
          // next
        }
      }
    }
    throw new NoSuchMethodException(type.getName() + "." + name + "()");
  }
}
