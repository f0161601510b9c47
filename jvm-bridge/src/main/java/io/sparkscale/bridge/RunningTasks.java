package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The tasks started and not ended, and those aged out as lost (see {@link SparkscaleListener#AGE_OUT_MS}): Spark drops
 * events when a listener queue is full, and a task whose end never comes would stay busy forever and keep its executor
 * from ever looking idle. Not thread-safe: {@link SparkscaleListener} calls it under its lock.
 */
final class RunningTasks {
  // Aged-out tasks remembered, the latest first: one whose end comes after all (a zombie task of a failed stage
  // attempt, a killed task slow to stop) was not lost, and is counted once.
  static final int MAX_AGED_OUT_TASKS = 4_096;

  /** A stage attempt that has running tasks: when it completed, -1 until then. */
  static final class StageRun {
    final int stageId;
    long completedMs = -1;

    StageRun(int stageId) {
      this.stageId = stageId;
    }
  }

  /** @param tag null when the task's stage belongs to no streaming query */
  record RunningTask(String executorId, long launchMs, Tag tag, StageRun stage) {
  }

  /** A task aged out: its tag, and the busy time counted for it then. */
  record AgedOut(Tag tag, double busyMs) {
  }

  /** A task aged out by {@link #sweep}, and its time up to its last possible end. */
  record AgedOutNow(RunningTask task, double busyMs) {
  }

  /**
   * The elapsed part of the running tasks as of a sweep: in all, per executor (by index; tasks on executors no longer
   * tracked count in the total only) and per query; and the tasks the sweep aged out.
   */
  record Inflight(double totalMs, double[] byExecutorIndex, Map<String, double[]> byQuery, List<AgedOutNow> agedOut) {
  }

  private final HashMap<Long, RunningTask> running = new HashMap<>();
  // Stage attempts with tasks started and no completion seen yet, by stage key. Their running tasks share the record,
  // so a completion reaches every one of them however many stages complete after it. The bound only matters when
  // completions are lost with dropped events; the tasks of a stage dropped from it then end when their executor goes.
  private final LinkedHashMap<Long, StageRun> runningStages =
      BoundedMaps.bounded(BoundedMaps.MAX_RUNNING_STAGES, false);
  private final LinkedHashMap<Long, AgedOut> agedOut = BoundedMaps.bounded(MAX_AGED_OUT_TASKS, false);
  private long tasksAgedOut;

  void started(long taskId, String executorId, long launchMs, Tag tag, int stageId, int attempt) {
    StageRun stage = runningStages.computeIfAbsent(BoundedMaps.stageKey(stageId, attempt), k -> new StageRun(stageId));
    running.put(taskId, new RunningTask(executorId, launchMs, tag, stage));
  }

  void stageCompleted(int stageId, int attempt, long completedMs) {
    StageRun stage = runningStages.remove(BoundedMaps.stageKey(stageId, attempt));
    if (stage != null) {
      stage.completedMs = completedMs;
    }
  }

  /** The running task whose end came, no longer running; null when it was not running. */
  RunningTask ended(long taskId) {
    return running.remove(taskId);
  }

  /** An ended task that was aged out as lost, no longer counted aged out; null when it was not aged out. */
  AgedOut endedAfterAgeOut(long taskId) {
    AgedOut aged = agedOut.remove(taskId);
    if (aged != null) {
      tasksAgedOut--;
    }
    return aged;
  }

  /** Tasks aged out and whose end has not come since. */
  long agedOutCount() {
    return tasksAgedOut;
  }

  int size() {
    return running.size();
  }

  /**
   * The running tasks' elapsed time as of {@code now}, in one pass that also ages out the tasks whose end was lost
   * (after dropped events they may be tens of thousands). A task ended at the latest when its stage completed or its
   * executor was removed: {@link SparkscaleListener#AGE_OUT_MS} after that its end is lost. {@code active}, the stages
   * the status store lists as active (null: unknown): a task running for {@link SparkscaleListener#AGE_OUT_MS} whose
   * stage it does not list lost its end and its stage's completion both (younger ones may be ahead of the store's
   * queue). The caller counts the aged-out tasks' busy time where they ran ({@link Inflight#agedOut}).
   */
  Inflight sweep(long now, Set<Integer> active, ExecutorTracker executors) {
    double[] byExecutor = new double[executors.indexBound()];
    HashMap<String, double[]> byQuery = new HashMap<>();
    List<AgedOutNow> aged = new ArrayList<>();
    double total = 0;
    for (Iterator<Map.Entry<Long, RunningTask>> it = running.entrySet().iterator(); it.hasNext(); ) {
      Map.Entry<Long, RunningTask> entry = it.next();
      RunningTask rt = entry.getValue();
      ExecutorTracker.Executor e = executors.get(rt.executorId());
      long end = lastPossibleEnd(rt, e, now);
      double elapsed = Math.max(0L, end - rt.launchMs());
      boolean stageGone = end == now && active != null && now - rt.launchMs() >= SparkscaleListener.AGE_OUT_MS
          && !active.contains(rt.stage().stageId);
      if (end != now && now - end >= SparkscaleListener.AGE_OUT_MS || stageGone) {
        it.remove();
        tasksAgedOut++;
        agedOut.put(entry.getKey(), new AgedOut(rt.tag(), elapsed));
        aged.add(new AgedOutNow(rt, elapsed));
        continue;
      }
      total += elapsed;
      if (e != null) {
        byExecutor[e.index] += elapsed;
      }
      if (rt.tag() != null) {
        byQuery.computeIfAbsent(rt.tag().queryId(), q -> new double[1])[0] += elapsed;
      }
    }
    return new Inflight(total, byExecutor, byQuery, aged);
  }

  private static long lastPossibleEnd(RunningTask rt, ExecutorTracker.Executor e, long now) {
    long end = now;
    if (e != null && e.removedMs != null) {
      end = Math.min(end, e.removedMs);
    }
    long stageDone = rt.stage().completedMs;
    return stageDone >= 0 ? Math.min(end, stageDone) : end;
  }
}
