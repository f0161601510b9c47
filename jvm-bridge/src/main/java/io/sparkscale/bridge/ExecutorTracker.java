package io.sparkscale.bridge;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The executors as the events tell them: added, removed (the latest {@link #MAX_REMOVED_EXECUTORS} kept), their tasks'
 * counters, and the slot time of all of them. Not thread-safe: {@link SparkscaleListener} calls it under its lock.
 */
final class ExecutorTracker {
  static final int MAX_REMOVED_EXECUTORS = 200;
  static final String UNLISTED_REASON = "no longer listed by Spark's scheduler backend for 30 s (its removal event was"
      + " lost)";

  static final class Executor {
    final int index; // dense, for the per-batch sets of executors
    String host;
    int cores;
    long addedMs;
    Long removedMs;
    String removedReason;
    int runningTasks;
    double busyMs; // finished tasks only; running ones are added at snapshot time
    long tasksFinished;
    long tasksFailed;
    double gcMs;
    double runMs;
    long heapUsedBytes = -1;
    long unlistedSinceMs = -1; // the first snapshot that found the scheduler backend no longer lists it; -1: listed

    Executor(int index) {
      this.index = index;
    }

    /** An ended task's counters; {@code busy} is the busy time not counted for it yet (see RunningTasks). */
    void taskEnded(double busy, double gc, double run, TaskOutcome outcome) {
      busyMs += busy;
      gcMs += gc;
      runMs += run;
      if (outcome == TaskOutcome.SUCCEEDED) {
        tasksFinished++;
      } else if (outcome == TaskOutcome.FAILED) {
        tasksFailed++;
      }
    }

    /** A running task aged out as lost (see RunningTasks): its time so far stays busy, and it no longer runs. */
    void taskAgedOut(double busy) {
      busyMs += busy;
      if (runningTasks > 0) {
        runningTasks--;
      }
    }

    /** A heap reading; none (0 or less) keeps the last. */
    void heapUsed(long bytes) {
      if (bytes > 0) {
        heapUsedBytes = bytes;
      }
    }

    boolean live() {
      return removedMs == null;
    }
  }

  /** What {@link #copy} returns: the executors' rows and the slot time of all executors ever tracked. */
  record Copy(List<SnapshotWriter.ExecutorState> rows, double slotMs) {
  }

  private final int confCoresPerExecutor; // 0 when spark.executor.cores is unset
  private int firstExecutorCores;
  private int executorsSeen; // the next Executor.index
  private final LinkedHashMap<String, Executor> executors = new LinkedHashMap<>();
  private final ArrayDeque<String> removedOrder = new ArrayDeque<>();
  // Totals survive the eviction of old removed executors.
  private double retiredSlotMs;
  private long executorsAdded;
  private long executorsRemoved;

  ExecutorTracker(int confCoresPerExecutor) {
    this.confCoresPerExecutor = confCoresPerExecutor;
  }

  void added(String id, String host, int cores, long addedMs) {
    Executor before = executors.get(id);
    if (before != null && before.removedMs != null) {
      // The id registered again after its removal: its earlier life retires now, as an evicted removal does. Left in
      // removedOrder, it would evict the live executor 200 removals later.
      removedOrder.remove(id);
      executors.remove(id);
      retiredSlotMs += slotMs(before, before.removedMs);
    }
    Executor e = new Executor(executorsSeen++);
    e.host = host;
    e.cores = cores;
    e.addedMs = addedMs;
    executors.put(id, e);
    executorsAdded++;
    if (firstExecutorCores == 0) {
      firstExecutorCores = e.cores;
    }
  }

  /** A removal event; one of an executor not tracked or removed already is ignored. */
  void removed(String id, long removedMs, String reason) {
    Executor e = executors.get(id);
    if (e != null && e.removedMs == null) {
      markRemoved(id, e, removedMs, reason);
    }
  }

  private void markRemoved(String id, Executor e, long removedMs, String reason) {
    e.removedMs = removedMs;
    e.removedReason = reason;
    executorsRemoved++;
    removedOrder.addLast(id);
    while (removedOrder.size() > MAX_REMOVED_EXECUTORS) {
      String oldId = removedOrder.removeFirst();
      Executor old = executors.get(oldId);
      if (old != null && old.removedMs != null) { // never a live one
        executors.remove(oldId);
        retiredSlotMs += slotMs(old, old.removedMs);
      }
    }
  }

  /** The executor, null when not tracked. */
  Executor get(String id) {
    return executors.get(id);
  }

  /** The executor a task started on; one we missed the added event of (a dropped event) is tracked from now. */
  Executor runningTaskOn(String id, String host, long seenMs) {
    Executor e = executors.get(id);
    if (e == null) {
      e = new Executor(executorsSeen++);
      e.host = host;
      e.cores = coresPerExecutor();
      e.addedMs = seenMs;
      executors.put(id, e);
      executorsAdded++;
    }
    return e;
  }

  /**
   * Catches up on removal events lost: an executor the scheduler backend has not {@code listed} for
   * {@link SparkscaleListener#AGE_OUT_MS} was removed (the backend drops an executor before it posts the event).
   */
  void removeUnlisted(Set<String> listed, long now) {
    List<String> gone = new ArrayList<>();
    for (Map.Entry<String, Executor> entry : executors.entrySet()) {
      Executor e = entry.getValue();
      if (e.removedMs != null || listed.contains(entry.getKey())) {
        e.unlistedSinceMs = -1;
      } else if (e.unlistedSinceMs < 0) {
        e.unlistedSinceMs = now;
      } else if (now - e.unlistedSinceMs >= SparkscaleListener.AGE_OUT_MS) {
        gone.add(entry.getKey());
      }
    }
    for (String id : gone) {
      // Removed now, not when it was first found unlisted: its slot time was reported up to now already.
      markRemoved(id, executors.get(id), now, UNLISTED_REASON);
    }
  }

  /** The executors live as far as the events seen tell, less {@code except}. */
  int liveExcept(Set<String> except) {
    int n = 0;
    for (Map.Entry<String, Executor> entry : executors.entrySet()) {
      if (entry.getValue().removedMs == null && !except.contains(entry.getKey())) {
        n++;
      }
    }
    return n;
  }

  boolean live(String id) {
    Executor e = executors.get(id);
    return e != null && e.live();
  }

  boolean idle(String id) {
    Executor e = executors.get(id);
    return e != null && e.live() && e.runningTasks == 0;
  }

  /** spark.executor.cores when set, else the first executor's cores, else 1. */
  int coresPerExecutor() {
    if (confCoresPerExecutor > 0) {
      return confCoresPerExecutor;
    }
    return firstExecutorCores > 0 ? firstExecutorCores : 1;
  }

  /** One more than the highest {@link Executor#index} given so far. */
  int indexBound() {
    return executorsSeen;
  }

  long added() {
    return executorsAdded;
  }

  long removed() {
    return executorsRemoved;
  }

  /**
   * The executors' counters as of {@code now}, with their running tasks' elapsed time ({@code inflightByIndex}, by
   * {@link Executor#index}) and the running jobs they hold shuffle output of ({@code shuffleJobs}, by id).
   */
  Copy copy(long now, double[] inflightByIndex, Map<String, Integer> shuffleJobs) {
    List<SnapshotWriter.ExecutorState> rows = new ArrayList<>(executors.size());
    double slotMs = retiredSlotMs;
    for (Map.Entry<String, Executor> entry : executors.entrySet()) {
      String id = entry.getKey();
      Executor e = entry.getValue();
      slotMs += slotMs(e, now);
      rows.add(new SnapshotWriter.ExecutorState(id, e.host, e.cores, e.addedMs, e.removedMs, e.removedReason,
          e.runningTasks, shuffleJobs.getOrDefault(id, 0), e.busyMs + inflightByIndex[e.index], e.tasksFinished,
          e.tasksFailed, e.gcMs, e.runMs, e.heapUsedBytes));
    }
    return new Copy(rows, slotMs);
  }

  private static double slotMs(Executor e, long now) {
    long end = e.removedMs != null ? Math.min(now, e.removedMs) : now;
    return (double) e.cores * Math.max(0L, end - e.addedMs);
  }
}
