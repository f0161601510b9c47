package io.sparkscale.bench;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;

import com.codahale.metrics.Counter;
import com.fasterxml.jackson.databind.ObjectMapper;

import io.sparkscale.bridge.SnapshotWriter;
import io.sparkscale.bridge.SparkscaleBridge;
import io.sparkscale.bridge.SparkscaleListener;

import org.apache.spark.SparkContext;
import org.apache.spark.Success$;
import org.apache.spark.executor.ExecutorMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.AsyncEventQueue;
import org.apache.spark.scheduler.JobSucceeded$;
import org.apache.spark.scheduler.LiveListenerBus;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerEvent;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerInterface;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.SparkListenerTaskStart;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.scheduler.TaskLocality;
import org.apache.spark.scheduler.cluster.ExecutorInfo;

import scala.Option;
import scala.collection.immutable.List$;

/**
 * Benchmark driver for benchmarks/bench_cost.py (not part of the bridge): posts synthetic scheduler events to the
 * sparkscale listener-bus queue of a live SparkContext from a JVM thread, because posting millions of events one by
 * one through py4j would measure py4j. Every entry point returns one JSON object for Python.
 *
 * <p>The events form micro-batch jobs as Structured Streaming runs them: per job a JobStart carrying the query id and
 * batch id job properties, one StageSubmitted, TaskStart/TaskEnd pairs (at most {@code window} tasks running at once),
 * a StageCompleted and a JobEnd. They are built once into a pool and posted cyclically, so the posting thread costs
 * little more than the queue's offer() and the measured rate is the consumer's.
 *
 * <p>Compiled against the running pyspark's jars and the bridge jar (Spark 4.x constructors); uses reflection only to
 * read private fields of Spark's bus (its queue list and the in-flight event count).
 */
public final class ListenerFlood {
  static final String BRIDGE_QUEUE = "sparkscale";
  static final String NOOP_QUEUE = "sparkscaleBenchNoop";
  // A second bridge listener on a queue of its own with a larger capacity: the same handlers, more buffer.
  static final String BIG_QUEUE = "sparkscaleBenchBig";
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  private static SparkContext sc;
  private static LiveListenerBus bus;
  private static SparkListenerEvent[] pool = new SparkListenerEvent[0];
  private static int poolTaskEnds;
  private static int[] jobStarts = new int[0]; // pool index of each job's first event, and pool.length last
  private static int[] jobTaskEnds = new int[0];
  private static int executorsAdded;
  private static List<String> queryIds = new ArrayList<>();
  private static int nextTaskId = 1 << 28; // ids of tasks posted outside the pool
  private static int nextStageId = 1 << 20;
  private static int nextBatchId = 1_000_000; // batches posted outside the pool

  private ListenerFlood() {
  }

  // ------------------------------------------------------------------ set-up

  /**
   * Builds the pool: {@code queries} queries x {@code batches} micro-batch jobs x {@code tasks} tasks over
   * {@code executors} executors (executor-added events are posted to the bridge queue first). Returns the query ids.
   */
  public static String setup(SparkContext context, int executors, int queries, int batches, int tasks, int window)
      throws Exception {
    sc = context;
    bus = context.listenerBus();
    addExecutors(executors);
    queryIds = new ArrayList<>();
    for (int q = 0; q < queries; q++) {
      queryIds.add(new UUID(0x5ca1e5ca1eL, q).toString());
    }
    long now = System.currentTimeMillis();
    TaskMetrics metrics = new TaskMetrics();
    metrics.setExecutorRunTime(40L);
    metrics.setJvmGCTime(1L);
    ExecutorMetrics peaks = new ExecutorMetrics();
    ArrayList<SparkListenerEvent> events = new ArrayList<>();
    int job = 0;
    int taskId = 0;
    int taskEnds = 0;
    ArrayList<Integer> starts = new ArrayList<>();
    for (int b = 0; b < batches; b++) {
      for (int q = 0; q < queries; q++, job++) {
        starts.add(events.size());
        Properties props = new Properties();
        props.setProperty("sql.streaming.queryId", queryIds.get(q));
        props.setProperty("streaming.sql.batchId", Integer.toString(b));
        StageInfo stage = stage(job, tasks);
        stage.completionTime_$eq(Option.apply((Object) now));
        events.add(new SparkListenerJobStart(job, now, List$.MODULE$.empty().$colon$colon(stage), props));
        events.add(new SparkListenerStageSubmitted(stage, props));
        SparkListenerTaskEnd[] ends = new SparkListenerTaskEnd[tasks];
        for (int t = 0; t < tasks; t++, taskId++) {
          String exec = Integer.toString(taskId % executors);
          TaskInfo info = new TaskInfo(taskId, t, 0, t, now - 50, exec, "host-" + exec,
              TaskLocality.PROCESS_LOCAL(), false);
          info.finishTime_$eq(now);
          ends[t] = new SparkListenerTaskEnd(job, 0, "ResultTask", Success$.MODULE$, info, peaks, metrics);
          events.add(new SparkListenerTaskStart(job, 0, info));
          if (t >= window) {
            events.add(ends[t - window]); // a slot frees, the next task starts
            taskEnds++;
          }
        }
        for (int t = Math.max(0, tasks - window); t < tasks; t++) {
          events.add(ends[t]);
          taskEnds++;
        }
        events.add(new SparkListenerStageCompleted(stage));
        events.add(new SparkListenerJobEnd(job, now, JobSucceeded$.MODULE$));
      }
    }
    pool = events.toArray(new SparkListenerEvent[0]);
    poolTaskEnds = taskEnds;
    starts.add(pool.length);
    jobStarts = starts.stream().mapToInt(Integer::intValue).toArray();
    jobTaskEnds = new int[job];
    Arrays.fill(jobTaskEnds, tasks);
    drain(queue(BRIDGE_QUEUE), 60_000);
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("poolEvents", pool.length);
    out.put("poolTaskEnds", poolTaskEnds);
    out.put("executors", executorsAdded);
    out.put("queryIds", queryIds);
    out.put("capacity", queue(BRIDGE_QUEUE).capacity());
    return JSON.writeValueAsString(out);
  }

  /** Executor-added events up to {@code total} executors (ids 0..total-1, 4 cores each) on the bridge queue. */
  static void addExecutors(int total) throws Exception {
    AsyncEventQueue q = queue(BRIDGE_QUEUE);
    scala.collection.immutable.Map<String, String> none = scala.collection.immutable.Map$.MODULE$.empty();
    for (int e = executorsAdded; e < total; e++) {
      q.post(new SparkListenerExecutorAdded(System.currentTimeMillis(), Integer.toString(e),
          new ExecutorInfo("host-" + e, 4, none)));
    }
    executorsAdded = Math.max(executorsAdded, total);
  }

  /** One job of one stage in each query, {@code perQuery} tasks started and never ended: running at snapshot time. */
  public static String startRunningTasks(int perQuery) throws Exception {
    AsyncEventQueue q = queue(BRIDGE_QUEUE);
    for (SparkListenerEvent e : runningTaskEvents(perQuery)) {
      q.post(e);
    }
    drain(q, 60_000);
    return JSON.writeValueAsString(Map.of("running", perQuery * queryIds.size()));
  }

  /** The events of {@link #startRunningTasks}: a job and stage per query, its tasks started over the executors. */
  private static List<SparkListenerEvent> runningTaskEvents(int perQuery) {
    long now = System.currentTimeMillis();
    ArrayList<SparkListenerEvent> events = new ArrayList<>();
    int started = 0;
    for (String queryId : queryIds) {
      int stageId = nextStageId++;
      Properties props = new Properties();
      props.setProperty("sql.streaming.queryId", queryId);
      props.setProperty("streaming.sql.batchId", "100000");
      StageInfo stage = stage(stageId, perQuery);
      events.add(new SparkListenerJobStart(stageId, now, List$.MODULE$.empty().$colon$colon(stage), props));
      events.add(new SparkListenerStageSubmitted(stage, props));
      for (int t = 0; t < perQuery; t++, started++) {
        String exec = Integer.toString(started % Math.max(1, executorsAdded));
        events.add(new SparkListenerTaskStart(stageId, 0, new TaskInfo(nextTaskId++, t, 0, t, now, exec,
            "host-" + exec, TaskLocality.PROCESS_LOCAL(), false)));
      }
    }
    return events;
  }

  /**
   * One new micro-batch in each query, {@code tasks} tasks started and ended: what the listener sees between two polls
   * of the control loop when every query's trigger is as short as the loop's interval.
   */
  public static String nextBatches(int tasks) throws Exception {
    AsyncEventQueue q = queue(BRIDGE_QUEUE);
    long now = System.currentTimeMillis();
    TaskMetrics metrics = new TaskMetrics();
    metrics.setExecutorRunTime(40L);
    String batchId = Integer.toString(nextBatchId++);
    int ended = 0;
    for (String queryId : queryIds) {
      int stageId = nextStageId++;
      Properties props = new Properties();
      props.setProperty("sql.streaming.queryId", queryId);
      props.setProperty("streaming.sql.batchId", batchId);
      StageInfo stage = stage(stageId, tasks);
      stage.completionTime_$eq(Option.apply((Object) now));
      q.post(new SparkListenerJobStart(stageId, now, List$.MODULE$.empty().$colon$colon(stage), props));
      q.post(new SparkListenerStageSubmitted(stage, props));
      for (int t = 0; t < tasks; t++) {
        String exec = Integer.toString(ended % Math.max(1, executorsAdded));
        TaskInfo info = new TaskInfo(nextTaskId++, t, 0, t, now - 50, exec, "host-" + exec,
            TaskLocality.PROCESS_LOCAL(), false);
        q.post(new SparkListenerTaskStart(stageId, 0, info));
        info.finishTime_$eq(now);
        q.post(new SparkListenerTaskEnd(stageId, 0, "ResultTask", Success$.MODULE$, info, new ExecutorMetrics(),
            metrics));
        ended++;
      }
      q.post(new SparkListenerStageCompleted(stage));
      q.post(new SparkListenerJobEnd(stageId, now, JobSucceeded$.MODULE$));
    }
    drain(q, 60_000);
    return JSON.writeValueAsString(Map.of("batches", queryIds.size(), "taskEnds", ended));
  }

  private static StageInfo stage(int stageId, int tasks) {
    return new StageInfo(stageId, 0, "bench", tasks, List$.MODULE$.empty(), List$.MODULE$.empty(), "",
        StageInfo.$lessinit$greater$default$8(), StageInfo.$lessinit$greater$default$9(),
        StageInfo.$lessinit$greater$default$10(), 0, false, 0);
  }

  // ------------------------------------------------------------------ measurements

  /**
   * The bridge listener's handlers alone, called on this thread (no queue, no Spark overhead), on a fresh
   * listener instance so that the live one's counters stay exact.
   */
  public static String handlerAlone(double seconds) throws Exception {
    SparkscaleListener l = new SparkscaleListener(sc.conf());
    scala.collection.immutable.Map<String, String> none = scala.collection.immutable.Map$.MODULE$.empty();
    for (int e = 0; e < executorsAdded; e++) {
      l.onExecutorAdded(new SparkListenerExecutorAdded(0L, Integer.toString(e), new ExecutorInfo("h", 4, none)));
    }
    long ends = 0;
    long events = 0;
    long cpuStart = THREADS.getCurrentThreadCpuTime();
    long start = System.nanoTime();
    long stop = start + (long) (seconds * 1e9);
    while (System.nanoTime() < stop) {
      for (SparkListenerEvent e : pool) {
        deliver(l, e);
      }
      ends += poolTaskEnds;
      events += pool.length;
    }
    double elapsed = (System.nanoTime() - start) / 1e9;
    Map<String, Object> out = result("handler alone", ends, events, elapsed);
    putCpu(out, (THREADS.getCurrentThreadCpuTime() - cpuStart) / 1e9, ends, events);
    return JSON.writeValueAsString(out);
  }

  /**
   * As fast as the consumer takes them: the poster waits while the queue is near full, so nothing is dropped and the
   * rate is the consumer's. {@code target}: "sparkscale" (the bridge's queue), "noop" (a queue of its own with a
   * listener that does nothing: Spark's per-event cost alone), "bus" (LiveListenerBus.post: every queue of the
   * application gets the events, the poster waits on the bridge queue) or "big:N" (a fresh bridge listener on a
   * queue of its own of capacity N).
   */
  public static String saturate(String target, double seconds) throws Exception {
    return run(target, seconds, 0.0);
  }

  /** At a fixed rate of task ends per second (the events around them in proportion), without waiting: drops show. */
  public static String paced(String target, double taskEndsPerSecond, double seconds) throws Exception {
    return run(target, seconds, taskEndsPerSecond);
  }

  private static String run(String target, double seconds, double taskEndsPerSecond) throws Exception {
    boolean noop = "noop".equals(target);
    boolean viaBus = "bus".equals(target);
    boolean big = target.startsWith("big:");
    SparkListenerInterface own = null;
    if (noop) {
      own = new SparkListener() {
      };
      bus.addToQueue(own, NOOP_QUEUE);
    } else if (big) {
      // Read by the queue when addToQueue creates it (the bus shares the context's SparkConf).
      sc.conf().set("spark.scheduler.listenerbus.eventqueue." + BIG_QUEUE + ".capacity", target.substring(4));
      SparkscaleListener l = new SparkscaleListener(sc.conf());
      scala.collection.immutable.Map<String, String> none = scala.collection.immutable.Map$.MODULE$.empty();
      for (int e = 0; e < executorsAdded; e++) {
        l.onExecutorAdded(new SparkListenerExecutorAdded(0L, Integer.toString(e), new ExecutorInfo("h", 4, none)));
      }
      own = l;
      bus.addToQueue(own, BIG_QUEUE);
    }
    try {
      AsyncEventQueue q = queue(noop ? NOOP_QUEUE : big ? BIG_QUEUE : BRIDGE_QUEUE);
      AtomicLong inFlight = eventCount(q);
      int capacity = q.capacity();
      SparkscaleListener bridge = noop ? null : big ? (SparkscaleListener) own : bridgeListener(q);
      long finishedBefore = bridge == null ? 0 : tasksFinished(bridge);
      Map<String, Long> droppedBefore = dropped();
      long dispatchId = dispatchThread(q).getId();
      long cpuStart = THREADS.getThreadCpuTime(dispatchId);
      long ends = 0;
      long events = 0;
      long maxDepth = 0;
      int job = 0;
      long start = System.nanoTime();
      long stop = start + (long) (seconds * 1e9);
      long now = start;
      // Whole jobs only, so that no task is left running in the live listener when the time is up.
      while (now < stop) {
        int from = jobStarts[job];
        int to = jobStarts[job + 1];
        // Waits park rather than spin: on a machine of few cores a spinning poster would take the
        // core the queue's dispatch thread needs, and measure itself.
        if (taskEndsPerSecond > 0) {
          // Ahead of schedule: wait until the schedule catches up with what was posted.
          long due = start + (long) (ends / taskEndsPerSecond * 1e9);
          while (now < due) {
            LockSupport.parkNanos(Math.min(due - now, 200_000L));
            now = System.nanoTime();
          }
        } else {
          while (inFlight.get() > capacity - 2L * (to - from)) {
            LockSupport.parkNanos(20_000L);
          }
        }
        for (int k = from; k < to; k++) {
          if (viaBus) {
            bus.post(pool[k]);
          } else {
            q.post(pool[k]);
          }
        }
        ends += jobTaskEnds[job];
        events += to - from;
        job = job + 1 == jobTaskEnds.length ? 0 : job + 1;
        maxDepth = Math.max(maxDepth, inFlight.get());
        now = System.nanoTime();
      }
      double postSeconds = (now - start) / 1e9;
      boolean drained = drain(q, 120_000);
      double elapsed = (System.nanoTime() - start) / 1e9;
      Map<String, Object> out = result(target, ends, events, elapsed);
      putCpu(out, (THREADS.getThreadCpuTime(dispatchId) - cpuStart) / 1e9, ends, events);
      out.put("targetTaskEndsPerSecond", taskEndsPerSecond);
      out.put("postedTaskEndsPerSecond", ends / postSeconds);
      out.put("drained", drained);
      out.put("maxQueueDepth", maxDepth);
      out.put("capacity", capacity);
      Map<String, Long> droppedAfter = dropped();
      Map<String, Long> droppedDelta = new LinkedHashMap<>();
      for (Map.Entry<String, Long> entry : droppedAfter.entrySet()) {
        droppedDelta.put(entry.getKey(), entry.getValue() - droppedBefore.getOrDefault(entry.getKey(), 0L));
      }
      out.put("dropped", droppedDelta.getOrDefault(q.name(), 0L));
      out.put("droppedByQueue", droppedDelta);
      if (bridge != null) {
        out.put("bridgeTasksFinished", tasksFinished(bridge) - finishedBefore);
      }
      return JSON.writeValueAsString(out);
    } finally {
      if (own != null) {
        bus.removeListener(own); // the queue goes with its last listener
      }
    }
  }

  /**
   * The listener's copy of its counters under its lock ({@code n} times), on a fresh listener instance fed the pool
   * once (every query's batches, all ended) and {@code runningPerQuery} running tasks per query: the state of a
   * healthy application of that size, without the tasks whose end events the paced runs dropped.
   */
  public static String freshCaptureCost(int n, int runningPerQuery) throws Exception {
    SparkscaleListener l = new SparkscaleListener(sc.conf());
    scala.collection.immutable.Map<String, String> none = scala.collection.immutable.Map$.MODULE$.empty();
    for (int e = 0; e < executorsAdded; e++) {
      l.onExecutorAdded(new SparkListenerExecutorAdded(0L, Integer.toString(e), new ExecutorInfo("h", 4, none)));
    }
    for (SparkListenerEvent e : pool) {
      deliver(l, e);
    }
    for (SparkListenerEvent e : runningTaskEvents(runningPerQuery)) {
      deliver(l, e);
    }
    double[] locked = new double[n];
    for (int k = 0; k < n; k++) {
      long t0 = System.nanoTime();
      l.capture(System.currentTimeMillis(), -1);
      locked[k] = (System.nanoTime() - t0) / 1e6;
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("n", n);
    out.put("runningTasks", runningTasks(l));
    out.put("captureMs", stats(locked));
    return JSON.writeValueAsString(out);
  }

  /**
   * What one poll of the bridge costs inside the JVM, {@code n} times each: the listener's capture of its counters
   * (the part that holds the listener's lock, blocking its queue) and SparkscaleBridge.snapshotJson() (snapshot +
   * Jackson), in ms.
   */
  public static String snapshotCost(int n) throws Exception {
    SparkscaleListener l = bridgeListener(queue(BRIDGE_QUEUE));
    String appId = sc.applicationId();
    // The running tasks the listener tracks, each a step of the copy: the ones started for this section and those
    // whose end the paced runs dropped, until they age out.
    int started = runningTasks(l);
    double[] locked = new double[n];
    double[] json = new double[n];
    int chars = 0;
    for (int k = 0; k < n; k++) {
      long t0 = System.nanoTime();
      SnapshotWriter.State state = l.capture(System.currentTimeMillis(), -1);
      long t1 = System.nanoTime();
      Map<String, Object> snap = SnapshotWriter.write(state, appId, 0L);
      String text = SparkscaleBridge.snapshotJson();
      long t2 = System.nanoTime();
      locked[k] = (t1 - t0) / 1e6;
      json[k] = (t2 - t1) / 1e6;
      chars = text.length();
      if (snap.isEmpty()) {
        throw new IllegalStateException("empty snapshot");
      }
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("n", n);
    out.put("snapshotMs", stats(locked));
    out.put("snapshotJsonMs", stats(json));
    out.put("jsonChars", chars);
    out.put("runningTasksAtStart", started);
    out.put("runningTasksAtEnd", runningTasks(l));
    return JSON.writeValueAsString(out);
  }

  // ------------------------------------------------------------------ helpers

  /** The listener's own count: the executors' runningTasks counters count the flood's replayed task ids twice. */
  private static int runningTasks(SparkscaleListener l) {
    return l.runningTasks();
  }

  private static Map<String, Object> result(String target, long ends, long events, double elapsed) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("target", target);
    out.put("taskEnds", ends);
    out.put("events", events);
    out.put("seconds", elapsed);
    out.put("taskEndsPerSecond", ends / elapsed);
    out.put("eventsPerSecond", events / elapsed);
    return out;
  }

  /**
   * The consumer's CPU time (the queue's dispatch thread, or this thread for the handlers alone): on a shared machine
   * wall-clock rates fall with the neighbours' load, task ends per CPU-second say what one core of its own absorbs.
   */
  private static void putCpu(Map<String, Object> out, double cpuSeconds, long ends, long events) {
    out.put("cpuSeconds", cpuSeconds);
    out.put("taskEndsPerCpuSecond", ends / cpuSeconds);
    out.put("cpuNsPerEvent", cpuSeconds * 1e9 / events);
  }

  private static Map<String, Object> stats(double[] values) {
    double[] v = values.clone();
    Arrays.sort(v);
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("min", v[0]);
    out.put("median", v[v.length / 2]);
    out.put("p90", v[Math.min(v.length - 1, (int) Math.ceil(0.9 * v.length) - 1)]);
    out.put("max", v[v.length - 1]);
    return out;
  }

  /** What Spark's bus does for each listener (SparkListenerBus.doPostEvent), for the events the pool holds. */
  private static void deliver(SparkListenerInterface l, SparkListenerEvent e) {
    if (e instanceof SparkListenerTaskEnd x) {
      l.onTaskEnd(x);
    } else if (e instanceof SparkListenerTaskStart x) {
      l.onTaskStart(x);
    } else if (e instanceof SparkListenerStageSubmitted x) {
      l.onStageSubmitted(x);
    } else if (e instanceof SparkListenerStageCompleted x) {
      l.onStageCompleted(x);
    } else if (e instanceof SparkListenerJobStart x) {
      l.onJobStart(x);
    } else if (e instanceof SparkListenerJobEnd x) {
      l.onJobEnd(x);
    }
  }

  @SuppressWarnings("unchecked")
  static AsyncEventQueue queue(String name) throws Exception {
    Field f = LiveListenerBus.class.getDeclaredField("queues");
    f.setAccessible(true);
    for (AsyncEventQueue q : (List<AsyncEventQueue>) f.get(bus)) {
      if (q.name().equals(name)) {
        return q;
      }
    }
    throw new IllegalStateException("no listener-bus queue '" + name + "': is the sparkscale plugin enabled?");
  }

  /** Posted and not yet fully dispatched (AsyncEventQueue.eventCount; what its own waitUntilEmpty polls). */
  private static AtomicLong eventCount(AsyncEventQueue q) throws Exception {
    Field f = AsyncEventQueue.class.getDeclaredField("eventCount");
    f.setAccessible(true);
    return (AtomicLong) f.get(q);
  }

  /** Polls every 20 us (not AsyncEventQueue.waitUntilEmpty's 10 ms sleeps) so that the end of a run is timed closely. */
  private static boolean drain(AsyncEventQueue q, long timeoutMs) throws Exception {
    AtomicLong inFlight = eventCount(q);
    long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
    while (inFlight.get() > 0) {
      if (System.nanoTime() > deadline) {
        return false;
      }
      LockSupport.parkNanos(20_000L);
    }
    return true;
  }

  private static Thread dispatchThread(AsyncEventQueue q) throws Exception {
    Field f = AsyncEventQueue.class.getDeclaredField("dispatchThread");
    f.setAccessible(true);
    return (Thread) f.get(q);
  }

  private static SparkscaleListener bridgeListener(AsyncEventQueue q) {
    for (SparkListenerInterface l : q.listeners()) {
      if (l instanceof SparkscaleListener s) {
        return s;
      }
    }
    throw new IllegalStateException("the sparkscale queue holds no SparkscaleListener");
  }

  @SuppressWarnings("unchecked")
  private static long tasksFinished(SparkscaleListener l) {
    Map<String, Object> totals = (Map<String, Object>) l.snapshot(sc.applicationId()).get("totals");
    return ((Number) totals.get("tasksFinished")).longValue();
  }

  /** numDroppedEvents of every queue, from the bus's metrics (what Spark's metrics system reports). */
  private static Map<String, Long> dropped() {
    Map<String, Long> out = new LinkedHashMap<>();
    for (Map.Entry<String, Counter> e : bus.metrics().metricRegistry().getCounters().entrySet()) {
      String name = e.getKey();
      if (name.startsWith("queue.") && name.endsWith(".numDroppedEvents")) {
        out.put(name.substring("queue.".length(), name.length() - ".numDroppedEvents".length()),
            e.getValue().getCount());
      }
    }
    return out;
  }
}
