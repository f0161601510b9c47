package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The snapshot Python reads (declared in snapshot-schema.json), written from what {@link SparkscaleListener#capture}
 * copied. It needs no lock: the copy is values only, so a poll holds up the listener's queue for the copying alone.
 */
public final class SnapshotWriter {
  private SnapshotWriter() {
  }

  /** An executor's counters as captured. */
  record ExecutorState(String id, String host, int cores, long addedMs, Long removedMs, String removedReason,
      int runningTasks, int liveShuffleJobs, double busyMs, long tasksFinished, long tasksFailed, double gcMs,
      double runMs, long heapUsedBytes) {
  }

  /** A micro-batch's counters as captured (see BatchTasks in snapshot-schema.json). */
  record BatchState(String id, double busyMs, long tasks, int executors, long firstLaunchMs, long lastEndMs,
      int stages) {
  }

  /** A query's counters and its recent batches as captured. */
  record QueryState(String id, double busyMs, long tasksFinished, long tasksFailed, double runMs, long jobsFailed,
      int maxStageTasks, List<BatchState> batches) {
  }

  /** What a snapshot reads under the listener's lock: values only. */
  public record State(long timeMs, int coresPerExecutor, long heapMaxBytes, List<ExecutorState> executors,
      Map<String, Object> totals, List<QueryState> queries, int otherTasks, String listenerId, long changes,
      long batchesSince) {
  }

  /**
   * The snapshot of {@code state}. Executors go as a table, one row each, its id first, then its fields in their
   * declared order: at 1,000 executors the field names repeated in every object were three quarters of a poll's JSON,
   * and what py4j carries and Python parses grows with it.
   */
  public static Map<String, Object> write(State state, String appId, long listenerEventsDropped) {
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("timeMs", state.timeMs());
    out.put("appId", appId);
    out.put("coresPerExecutor", state.coresPerExecutor());
    out.put("executors", executorRows(state));
    out.put("totals", state.totals());
    out.put("queries", queries(state.queries()));
    out.put("otherTasks", state.otherTasks());
    out.put("listenerEventsDropped", listenerEventsDropped);
    out.put("listenerId", state.listenerId());
    out.put("changes", state.changes());
    out.put("batchesSince", state.batchesSince());
    out.put("batchesPerQuery", QueryTracker.MAX_BATCHES_PER_QUERY);
    return out;
  }

  private static List<Object[]> executorRows(State state) {
    List<Object[]> rows = new ArrayList<>(state.executors().size());
    for (ExecutorState e : state.executors()) {
      rows.add(new Object[] {e.id(), e.host(), e.cores(), e.addedMs(), e.removedMs(), e.removedReason(),
          e.runningTasks(), e.liveShuffleJobs(), e.busyMs(), e.tasksFinished(), e.tasksFailed(), e.gcMs(), e.runMs(),
          e.heapUsedBytes(), state.heapMaxBytes()});
    }
    return rows;
  }

  private static Map<String, Object> queries(List<QueryState> queries) {
    Map<String, Object> out = new LinkedHashMap<>();
    for (QueryState q : queries) {
      Map<String, Object> x = new LinkedHashMap<>();
      x.put("busyMs", q.busyMs());
      x.put("tasksFinished", q.tasksFinished());
      x.put("tasksFailed", q.tasksFailed());
      x.put("runMs", q.runMs());
      x.put("jobsFailed", q.jobsFailed());
      x.put("maxStageTasks", q.maxStageTasks());
      x.put("batches", batches(q.batches()));
      out.put(q.id(), x);
    }
    return out;
  }

  private static Map<String, Object> batches(List<BatchState> batches) {
    Map<String, Object> out = new LinkedHashMap<>();
    for (BatchState b : batches) {
      Map<String, Object> y = new LinkedHashMap<>();
      y.put("busyMs", b.busyMs());
      y.put("tasks", b.tasks());
      y.put("executors", b.executors());
      y.put("firstLaunchMs", b.firstLaunchMs() < 0 ? null : b.firstLaunchMs());
      y.put("lastEndMs", b.lastEndMs() < 0 ? null : b.lastEndMs());
      y.put("stages", b.stages());
      out.put(b.id(), y);
    }
    return out;
  }
}
