package io.sparkscale.bridge;

import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;
import java.util.function.IntFunction;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

import org.apache.spark.JobExecutionStatus;
import org.apache.spark.Resubmitted$;
import org.apache.spark.SparkConf;
import org.apache.spark.executor.ExecutorMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.JobSucceeded$;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.SparkListenerTaskStart;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;

/**
 * Aggregates scheduler events into cumulative counters that Python polls with {@link #snapshot()}; the autoscaler
 * derives rates from differences between snapshots. The counters live in single-concern trackers (executors, the
 * queries' batches, other jobs' demand, shuffle holders, running and aged-out tasks, task totals), none thread-safe:
 * they all share this listener's one lock, so a snapshot copies them at one moment. Every handler is O(1) (a few map
 * operations under that lock); the per-snapshot work is proportional to executors + running tasks + queries' batches,
 * and under the lock it only copies values ({@link SnapshotWriter} builds the snapshot after).
 */
public class SparkscaleListener extends SparkListener {
  static final String DRIVER_ID = "driver";
  // A task still "running" this long after its stage completed or its executor was removed lost
  // its end event (Spark drops events when a listener queue is full): without its end it would
  // stay busy forever and keep its executor from ever looking idle. Also how long Spark's own views
  // must contradict the listener before it believes them (see capture and JobEnds).
  static final long AGE_OUT_MS = 30_000L;

  private final long heapMaxBytes;
  private final LongSupplier clock; // epoch ms: for events that carry no time, and snapshots not given one
  // Tells this listener's change counts from another's (a new SparkContext in the same Python process).
  private final String listenerId = java.util.UUID.randomUUID().toString();

  private final ExecutorTracker executors;
  private final QueryTracker queries = new QueryTracker();
  private final OtherJobsDemand otherJobs = new OtherJobsDemand();
  private final ShuffleHolders shuffle = new ShuffleHolders();
  private final RunningTasks running = new RunningTasks();
  private final TaskTotals totals = new TaskTotals();

  private final SparkViews views = new SparkViews();
  // Told of each executor whose last running task just ended (see IdleRemovals); nobody by default.
  private volatile Consumer<String> idleExecutors;

  public SparkscaleListener(SparkConf conf) {
    this(conf, System::currentTimeMillis);
  }

  /** @param clock epoch ms now (tests drive it) */
  SparkscaleListener(SparkConf conf, LongSupplier clock) {
    this.heapMaxBytes = conf.getSizeAsBytes("spark.executor.memory", "1g");
    this.clock = clock;
    int cores = 0;
    if (conf.contains("spark.executor.cores")) {
      try {
        cores = Integer.parseInt(conf.get("spark.executor.cores").trim());
      } catch (NumberFormatException e) {
        cores = 0;
      }
    }
    this.executors = new ExecutorTracker(cores);
  }

  /** The jobs, their stages and the stages' tags tracked now (for tests: the bounds hold when job ends are lost). */
  synchronized int[] trackedJobsAndStages() {
    return new int[] {queries.trackedJobs(), shuffle.trackedStages(), queries.trackedStages()};
  }

  /** Running tasks tracked now (for the benchmark: its replayed task ids leave the executors' counters off). */
  public synchronized int runningTasks() {
    return running.size();
  }

  // ---------------------------------------------------------------- wiring (the plugin sets these at install)

  /** Where snapshots read the events Spark's listener bus has dropped so far. */
  public void countDroppedEventsWith(LongSupplier dropped) {
    views.droppedEvents = dropped;
  }

  /** Where snapshots read the latest offsets of the queries' sources (see {@link SourceOffsets}); none by default. */
  public void readSourceOffsetsWith(Supplier<Map<String, Object>> readings) {
    views.sourceOffsets = readings;
  }

  /** Where snapshots read the executors Spark's scheduler backend lists (null: unknown); unknown by default. */
  public void listExecutorsWith(Supplier<Set<String>> ids) {
    views.listedExecutors = ids;
  }

  /** Where snapshots read the stages Spark's status store lists as active (null: unknown); unknown by default. */
  public void listActiveStagesWith(Supplier<Set<Integer>> ids) {
    views.activeStages = ids;
  }

  /** Whom to tell, on this thread, of each executor whose last running task just ended (see {@link IdleRemovals}). */
  public void reportIdleExecutorsTo(Consumer<String> hook) {
    this.idleExecutors = hook;
  }

  // ---------------------------------------------------------------- executors as the events tell them

  /** The executors live as far as the events seen tell, less {@code except}. */
  public synchronized int liveExecutorsExcept(Set<String> except) {
    return executors.liveExcept(except);
  }

  /** Whether this executor is live (added, not removed), as far as the events seen tell. */
  public synchronized boolean live(String executorId) {
    return executors.live(executorId);
  }

  /** Whether this executor is live and runs no task, as far as the events seen tell. */
  public synchronized boolean idle(String executorId) {
    return executors.idle(executorId);
  }

  // ---------------------------------------------------------------- executor events

  @Override
  public synchronized void onExecutorAdded(SparkListenerExecutorAdded event) {
    if (!DRIVER_ID.equals(event.executorId())) {
      executors.added(event.executorId(), event.executorInfo().executorHost(), event.executorInfo().totalCores(),
          event.time());
    }
  }

  @Override
  public synchronized void onExecutorRemoved(SparkListenerExecutorRemoved event) {
    executors.removed(event.executorId(), event.time(), event.reason());
  }

  @Override
  public synchronized void onExecutorMetricsUpdate(SparkListenerExecutorMetricsUpdate event) {
    ExecutorTracker.Executor e = executors.get(event.execId());
    if (e == null) {
      return; // the driver's own heartbeat, or an executor we no longer track
    }
    // Peaks since the last heartbeat, one entry per active stage (plus an executor-level one).
    long heap = -1;
    scala.collection.Iterator<ExecutorMetrics> it = event.executorUpdates().valuesIterator();
    while (it.hasNext()) {
      heap = Math.max(heap, it.next().getMetricValue("JVMHeapMemory"));
    }
    e.heapUsed(heap);
  }

  // ---------------------------------------------------------------- jobs and stages

  @Override
  public synchronized void onJobStart(SparkListenerJobStart event) {
    int[] stageIds = new int[event.stageInfos().size()];
    scala.collection.Iterator<StageInfo> it = event.stageInfos().iterator();
    for (int i = 0; it.hasNext(); i++) {
      stageIds[i] = it.next().stageId();
    }
    shuffle.jobStarted(event.jobId(), stageIds);
    queries.jobStarted(event.jobId(), event.properties(), stageIds);
  }

  @Override
  public synchronized void onJobEnd(SparkListenerJobEnd event) {
    shuffle.jobEnded(event.jobId());
    otherJobs.jobEnded(event.jobId());
    queries.jobEnded(event.jobId(), event.jobResult() == JobSucceeded$.MODULE$);
  }

  @Override
  public synchronized void onStageSubmitted(SparkListenerStageSubmitted event) {
    StageInfo info = event.stageInfo();
    if (queries.stageSubmitted(info.stageId(), event.properties(), info.numTasks())) {
      return;
    }
    long submitted = info.submissionTime().isDefined() ? (Long) info.submissionTime().get() : clock.getAsLong();
    otherJobs.stageSubmitted(info.stageId(), info.attemptNumber(), shuffle.jobOf(info.stageId()), submitted,
        info.numTasks());
  }

  @Override
  public synchronized void onStageCompleted(SparkListenerStageCompleted event) {
    StageInfo info = event.stageInfo();
    long done = info.completionTime().isDefined() ? (Long) info.completionTime().get() : clock.getAsLong();
    running.stageCompleted(info.stageId(), info.attemptNumber(), done);
    otherJobs.stageCompleted(info.stageId(), info.attemptNumber());
  }

  // ---------------------------------------------------------------- tasks

  @Override
  public synchronized void onTaskStart(SparkListenerTaskStart event) {
    TaskInfo info = event.taskInfo();
    if (DRIVER_ID.equals(info.executorId())) {
      return;
    }
    ExecutorTracker.Executor e = executors.runningTaskOn(info.executorId(), info.host(), info.launchTime());
    e.runningTasks++;
    // The tag travels with the task: its end may arrive after the job has ended (e.g. speculative copies).
    Tag tag = queries.stageTag(event.stageId());
    running.started(info.taskId(), info.executorId(), info.launchTime(), tag, event.stageId(), event.stageAttemptId());
    queries.taskStarted(tag, e.index, info.launchTime());
  }

  @Override
  public synchronized void onTaskEnd(SparkListenerTaskEnd event) {
    TaskInfo info = event.taskInfo();
    if (info == null || DRIVER_ID.equals(info.executorId())) {
      return;
    }
    if (event.reason() == Resubmitted$.MODULE$) {
      // Bookkeeping for a task that had already succeeded (its shuffle output was lost): counted before.
      otherJobs.taskResubmitted(event.stageId(), event.stageAttemptId(), info.index());
      return;
    }
    RunningTasks.RunningTask rt = running.ended(info.taskId());
    // Aged out as lost, yet here is its end: undo the age-out, and count only the busy time it did not count.
    RunningTasks.AgedOut aged = rt == null ? running.endedAfterAgeOut(info.taskId()) : null;
    // Only an executor-added event or a task start tracks an executor: a late end (e.g. of a task whose executor's
    // removal was evicted since) would bring it back as live for good. Its task still counts in the totals.
    ExecutorTracker.Executor e = executors.get(info.executorId());
    if (rt != null && e != null && e.runningTasks > 0) {
      e.runningTasks--;
      Consumer<String> hook = idleExecutors;
      if (e.runningTasks == 0 && hook != null) {
        hook.accept(info.executorId());
      }
    }
    Tag tag = rt != null && rt.tag() != null ? rt.tag()
        : aged != null && aged.tag() != null ? aged.tag() : queries.stageTag(event.stageId());

    long finish = info.finishTime() > 0 ? info.finishTime() : clock.getAsLong();
    double busy = Math.max(0L, finish - info.launchTime());
    // The age-out counted part of it in the executor's, the query's and the total busy time (not the batch's).
    double more = aged == null ? busy : Math.max(0.0, busy - aged.busyMs());
    TaskMetrics m = event.taskMetrics();
    double gc = m != null ? m.jvmGCTime() : 0.0;
    double run = m != null ? m.executorRunTime() : 0.0;
    TaskOutcome outcome = TaskOutcome.of(event.reason());

    totals.taskEnded(more, gc, run, outcome);
    if (outcome == TaskOutcome.SUCCEEDED) {
      otherJobs.taskSucceeded(event.stageId(), event.stageAttemptId(), info.index());
    }
    if (e != null) {
      e.taskEnded(more, gc, run, outcome);
      if (outcome == TaskOutcome.SUCCEEDED && "ShuffleMapTask".equals(event.taskType())) {
        shuffle.mapOutput(event.stageId(), info.executorId(), finish);
      }
      ExecutorMetrics peaks = event.taskExecutorMetrics();
      if (peaks != null) {
        e.heapUsed(peaks.getMetricValue("JVMHeapMemory"));
      }
    }
    if (tag != null) {
      queries.taskEnded(tag, more, busy, run, outcome, e == null ? -1 : e.index, finish);
    }
  }

  // ---------------------------------------------------------------- what Spark's status store says of jobs

  /**
   * Executors holding shuffle map output of a job that is still running: removing one now would fail the job's
   * tasks. Jobs that have ended by {@link JobEnds#jobEnded} ({@code status}: the status store's word on a job, null
   * when it does not know it) are forgotten: a job end lost with dropped events must not pin executors forever.
   */
  public HashSet<String> shuffleHolders(IntFunction<JobExecutionStatus> status, long now) {
    int[] jobs;
    synchronized (this) {
      jobs = shuffle.jobs();
    }
    HashMap<Integer, JobExecutionStatus> known = JobEnds.statuses(jobs, status); // Spark's store, outside our lock
    synchronized (this) {
      shuffle.forgetEnded(known, now);
      return shuffle.holders();
    }
  }

  /**
   * Forgets the stages of other jobs that have ended by {@link JobEnds#jobEnded} ({@code status} as for
   * {@link #shuffleHolders}): their stage-completed and job-end events were lost (a full listener queue), and their
   * tasks would count as demand for ever.
   */
  public void forgetOtherStages(IntFunction<JobExecutionStatus> status, long now) {
    int[] jobs;
    synchronized (this) {
      jobs = otherJobs.jobs();
    }
    HashMap<Integer, JobExecutionStatus> known = JobEnds.statuses(jobs, status);
    synchronized (this) {
      otherJobs.forgetEnded(known, now);
    }
  }

  // ---------------------------------------------------------------- snapshot

  /** One consistent view of all counters (epoch ms, ms, cumulative), as of the moment they are copied. */
  public Map<String, Object> snapshot(String appId) {
    return snapshotNow(appId, -1);
  }

  /**
   * {@link #snapshot(String)} with only the batches that changed after change count {@code batchesSince} (the
   * {@code changes} of an earlier snapshot of this listener; -1: all): the reader keeps the others from before. Its
   * time is read under the lock: no event in it is later than it (an executor added as it began, say).
   */
  public Map<String, Object> snapshotNow(String appId, long batchesSince) {
    return snapshot(appId, clock, batchesSince);
  }

  /** {@link #snapshotNow} as of {@code now} (epoch ms); tests and the benchmark give it. */
  public Map<String, Object> snapshot(String appId, long now, long batchesSince) {
    return snapshot(appId, () -> now, batchesSince);
  }
  public Map<String, Object> snapshot(String appId, long now) {
    return snapshot(appId, now, -1);
  }

  private Map<String, Object> snapshot(String appId, LongSupplier now, long batchesSince) {
    // Spark's views first, outside the lock: the listener's thread takes it for every event.
    Set<String> listed = views.listedExecutors();
    Set<Integer> active = views.activeStages();
    SnapshotWriter.State state;
    synchronized (this) {
      state = capture(now.getAsLong(), batchesSince, listed, active);
    }
    Map<String, Object> out = SnapshotWriter.write(state, appId, views.droppedSoFar());
    out.put("sourceOffsets", views.sourceOffsets());
    return out;
  }

  /** The counters as of {@code now}, copied under the lock (batches as {@link #snapshotNow}), for the writer. */
  public SnapshotWriter.State capture(long now, long batchesSince) {
    return capture(now, batchesSince, null, null);
  }

  /**
   * {@link #capture(long, long)}, first catching up, with Spark's own views, on what dropped events left behind (null:
   * that view is unknown): {@code listed}, the executors the scheduler backend lists (see
   * {@link ExecutorTracker#removeUnlisted}); {@code active}, the stages the status store lists as active (see
   * {@link RunningTasks#sweep}).
   */
  public synchronized SnapshotWriter.State capture(long now, long batchesSince, Set<String> listed,
                                                   Set<Integer> active) {
    if (listed != null) {
      executors.removeUnlisted(listed, now);
    }
    RunningTasks.Inflight inflight = running.sweep(now, active, executors);
    for (RunningTasks.AgedOutNow aged : inflight.agedOut()) {
      countAgedOut(aged.task(), aged.busyMs());
    }
    ExecutorTracker.Copy execs = executors.copy(now, inflight.byExecutorIndex(), shuffle.jobsPerExecutor());
    Map<String, Object> totalsNow = new LinkedHashMap<>();
    totalsNow.put("slotMs", execs.slotMs());
    totalsNow.put("busyMs", totals.busyMs + inflight.totalMs());
    totalsNow.put("tasksFinished", totals.finished);
    totalsNow.put("tasksFailed", totals.failed);
    totalsNow.put("tasksKilled", totals.killed);
    totalsNow.put("tasksAgedOut", running.agedOutCount());
    totalsNow.put("gcMs", totals.gcMs);
    totalsNow.put("runMs", totals.runMs);
    totalsNow.put("executorsAdded", executors.added());
    totalsNow.put("executorsRemoved", executors.removed());
    return new SnapshotWriter.State(now, executors.coresPerExecutor(), heapMaxBytes, execs.rows(), totalsNow,
        queries.copy(batchesSince, inflight.byQuery()), otherJobs.tasksLeft(), listenerId, queries.changes(),
        batchesSince);
  }

  /**
   * A running task whose end event was lost, counted as ended in tasksAgedOut (by {@link RunningTasks}): its time up to
   * its last possible end ({@code busy}) stays in the busy counters, so that they never go down.
   */
  private void countAgedOut(RunningTasks.RunningTask rt, double busy) {
    totals.taskAgedOut(busy);
    ExecutorTracker.Executor e = executors.get(rt.executorId());
    if (e != null) {
      e.taskAgedOut(busy);
    }
    if (rt.tag() != null) {
      queries.taskAgedOut(rt.tag(), busy);
    }
  }
}
