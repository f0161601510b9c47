package io.sparkscale.bridge;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.function.IntFunction;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

import org.apache.spark.ExceptionFailure;
import org.apache.spark.JobExecutionStatus;
import org.apache.spark.Resubmitted$;
import org.apache.spark.SparkConf;
import org.apache.spark.Success$;
import org.apache.spark.TaskKilled;
import org.apache.spark.TaskEndReason;
import org.apache.spark.TaskFailedReason;
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
 * derives rates from differences between snapshots. Every handler is O(1) (a few map operations under one lock);
 * the per-snapshot work is proportional to executors + running tasks + queries' batches, and under the lock it only
 * copies values.
 */
public class SparkscaleListener extends SparkListener {
  // Job-local properties set by Structured Streaming (StreamExecution.QUERY_ID_KEY, MicroBatchExecution.BATCH_ID_KEY).
  static final String QUERY_ID_KEY = "sql.streaming.queryId";
  static final String BATCH_ID_KEY = "streaming.sql.batchId";
  static final String DRIVER_ID = "driver";

  static final int MAX_REMOVED_EXECUTORS = 200;
  static final int MAX_STAGES_PER_QUERY = 20;
  static final int MAX_BATCHES_PER_QUERY = 64;
  static final int MAX_QUERIES = 256;
  static final int MAX_REASON_CHARS = 300;
  static final int MAX_RUNNING_STAGES = 10_000;
  // Jobs (and their stages) whose end has not come: a few at a time, unless job ends were lost with dropped events;
  // beyond this the eldest are forgotten (they have ended) rather than kept for the application's life.
  static final int MAX_RUNNING_JOBS = 10_000;
  // A task still "running" this long after its stage completed or its executor was removed lost
  // its end event (Spark drops events when a listener queue is full): without its end it would
  // stay busy forever and keep its executor from ever looking idle. Also how long Spark's own views
  // must contradict the listener before it believes them (see capture and jobEnded).
  static final long AGE_OUT_MS = 30_000L;
  static final String UNLISTED_REASON = "no longer listed by Spark's scheduler backend for 30 s (its removal event was"
      + " lost)";
  // Aged-out tasks remembered, the latest first: one whose end comes after all (a zombie task of a failed stage
  // attempt, a killed task slow to stop) was not lost, and is counted once.
  static final int MAX_AGED_OUT_TASKS = 4_096;

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
  }

  /** One micro-batch of a query: what its tasks did (see BatchTasks in snapshot-schema.json). */
  static final class Batch {
    long change; // the listener's change count when it last changed: snapshots can carry only what changed
    double busyMs;
    long tasks;
    final BitSet executors = new BitSet();
    long firstLaunchMs = -1;
    long lastEndMs = -1;
    int stages;
  }

  static final class Query {
    double busyMs;
    long tasksFinished;
    long tasksFailed;
    double runMs;
    long jobsFailed;
    final int[] stageTasks = new int[MAX_STAGES_PER_QUERY]; // ring buffer of numTasks of submitted stages
    int stagesSeen;
    final LinkedHashMap<String, Batch> batches = bounded(MAX_BATCHES_PER_QUERY, false);

    Batch batch(String batchId, long change) {
      Batch b = batches.computeIfAbsent(batchId, id -> new Batch());
      b.change = change;
      return b;
    }
  }

  /**
   * The streaming query / batch a stage or task belongs to.
   *
   * @param batchId null when the job was not a micro-batch job
   */
  record Tag(String queryId, String batchId, int jobId) {
  }

  /**
   * A running stage attempt of a job outside every streaming query (a batch or ML job sharing the application): its
   * tasks, and the indices of those that succeeded. The others are pending or running, and need slots.
   */
  record OtherStage(int jobId, long sinceMs, int tasks, BitSet succeeded) {
    int left() {
      return Math.max(0, tasks - succeeded.cardinality());
    }
  }

  /**
   * Executors holding shuffle map output of one job, and when the listener recorded the first of them (see
   * {@link #jobEnded}).
   */
  record Holders(long sinceMs, HashSet<String> executors) {
  }

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

  /** A task aged out (see {@link #AGE_OUT_MS}): its tag, and the busy time counted for it then. */
  record AgedOut(Tag tag, double busyMs) {
  }

  private static long stageKey(int stageId, int attempt) {
    return ((long) stageId << 20) | (attempt & 0xFFFFF);
  }

  private final long heapMaxBytes;
  private final int confCoresPerExecutor; // 0 when spark.executor.cores is unset
  private int firstExecutorCores;
  private int executorsSeen; // the next Executor.index
  private long changes; // changes to batches so far (see Batch.change)
  // Tells this listener's change counts from another's (a new SparkContext in the same Python process).
  private final String listenerId = java.util.UUID.randomUUID().toString();

  private final LinkedHashMap<String, Executor> executors = new LinkedHashMap<>();
  private final ArrayDeque<String> removedOrder = new ArrayDeque<>();
  private final HashMap<Long, RunningTask> running = new HashMap<>();
  private final LinkedHashMap<Integer, Tag> stageTags = bounded(MAX_RUNNING_STAGES, false);
  private final LinkedHashMap<Integer, Tag> jobTags = bounded(MAX_RUNNING_JOBS, false);
  // Shuffle output of running jobs, any job (streaming or not): stage -> job, and job -> executors holding map output
  // of it. Removing such an executor before its job ends loses that output, so the job's reduce tasks fail to fetch
  // it (FetchFailed) and the map stage is re-run; once the job has ended its shuffle output is never read again (a
  // later job that reuses the stage recomputes what a removed executor held instead of failing).
  private final LinkedHashMap<Integer, Integer> stageJobs = bounded(MAX_RUNNING_STAGES, false);
  private final HashMap<Integer, Holders> shuffleHolders = new HashMap<>();
  // Running stage attempts of other jobs, by stageKey: their tasks not yet succeeded are the demand of other jobs that
  // the autoscaler counts, as Spark's own dynamic allocation counts pending and running tasks.
  private final HashMap<Long, OtherStage> otherStages = new HashMap<>();
  // Stage attempts with tasks started and no completion seen yet, by stageKey. Their running tasks share the record,
  // so a completion reaches every one of them however many stages complete after it. The bound only matters when
  // completions are lost with dropped events; the tasks of a stage dropped from it then end when their executor goes.
  private final LinkedHashMap<Long, StageRun> runningStages = bounded(MAX_RUNNING_STAGES, false);
  private final LinkedHashMap<Long, AgedOut> agedOut = bounded(MAX_AGED_OUT_TASKS, false);
  private final LinkedHashMap<String, Query> queries = bounded(MAX_QUERIES, true); // least recently updated first

  /** A map that forgets its eldest entry beyond {@code max}: by insertion, or by access when {@code byAccess}. */
  static <K, V> LinkedHashMap<K, V> bounded(int max, boolean byAccess) {
    return new LinkedHashMap<>(16, 0.75f, byAccess) {
      @Override
      protected boolean removeEldestEntry(Map.Entry<K, V> eldest) {
        return size() > max;
      }
    };
  }

  /** The jobs, their stages and the stages' tags tracked now (for tests: the bounds hold when job ends are lost). */
  synchronized int[] trackedJobsAndStages() {
    return new int[] {jobTags.size(), stageJobs.size(), stageTags.size()};
  }

  // Totals survive the eviction of old removed executors.
  private double retiredSlotMs;
  private double finishedBusyMs;
  private long tasksFinished;
  private long tasksFailed;
  private long tasksKilled;
  private long tasksAgedOut;
  private double gcMs;
  private double runMs;
  private long executorsAdded;
  private long executorsRemoved;
  // Events Spark's listener bus dropped (its queues' counters, read outside the lock); 0 until the plugin wires it.
  private volatile LongSupplier droppedEvents = () -> 0L;
  private volatile Supplier<Map<String, Object>> sourceOffsets = Map::of;
  // Spark's own views, read at snapshot time outside the lock (null: unknown; nothing is wired by default): the
  // executors the scheduler backend lists and the stages the status store lists as active. They catch what a burst
  // of dropped events left behind (see capture).
  private volatile Supplier<Set<String>> listedExecutors = () -> null;
  private volatile Supplier<Set<Integer>> activeStages = () -> null;
  // Told of each executor whose last running task just ended (see IdleRemovals); nobody by default.
  private volatile java.util.function.Consumer<String> idleExecutors;
  private volatile long droppedSeen; // the last count read: it stands when a read fails

  public SparkscaleListener(SparkConf conf) {
    this.heapMaxBytes = conf.getSizeAsBytes("spark.executor.memory", "1g");
    int cores = 0;
    if (conf.contains("spark.executor.cores")) {
      try {
        cores = Integer.parseInt(conf.get("spark.executor.cores").trim());
      } catch (NumberFormatException e) {
        cores = 0;
      }
    }
    this.confCoresPerExecutor = cores;
  }

  /** Where snapshots read the events Spark's listener bus has dropped so far (the plugin sets it at install). */
  public void countDroppedEventsWith(LongSupplier dropped) {
    this.droppedEvents = dropped;
  }

  /** Where snapshots read the latest offsets of the queries' sources (see {@link SourceOffsets}); none by default. */
  public void readSourceOffsetsWith(Supplier<Map<String, Object>> readings) {
    this.sourceOffsets = readings;
  }

  /** Where snapshots read the executors Spark's scheduler backend lists (null: unknown); unknown by default. */
  public void listExecutorsWith(Supplier<Set<String>> ids) {
    this.listedExecutors = ids;
  }

  /** Where snapshots read the stages Spark's status store lists as active (null: unknown); unknown by default. */
  public void listActiveStagesWith(Supplier<Set<Integer>> ids) {
    this.activeStages = ids;
  }

  /** What {@code view} reads now, null when the read fails (a context being stopped): nothing is concluded then. */
  private static <T> T readOrNull(Supplier<T> view) {
    try {
      return view.get();
    } catch (RuntimeException e) {
      return null;
    }
  }

  /** Whom to tell, on this thread, of each executor whose last running task just ended (see {@link IdleRemovals}). */
  public void reportIdleExecutorsTo(java.util.function.Consumer<String> hook) {
    this.idleExecutors = hook;
  }

  /** The executors live as far as the events seen tell, less {@code except}. */
  public synchronized int liveExecutorsExcept(java.util.Set<String> except) {
    int n = 0;
    for (Map.Entry<String, Executor> entry : executors.entrySet()) {
      if (entry.getValue().removedMs == null && !except.contains(entry.getKey())) {
        n++;
      }
    }
    return n;
  }

  /** Whether this executor is live (added, not removed), as far as the events seen tell. */
  public synchronized boolean live(String executorId) {
    Executor e = executors.get(executorId);
    return e != null && e.removedMs == null;
  }

  /** Whether this executor is live and runs no task, as far as the events seen tell. */
  public synchronized boolean idle(String executorId) {
    Executor e = executors.get(executorId);
    return e != null && e.removedMs == null && e.runningTasks == 0;
  }

  /** The latest offsets read so far, by query id; a failed read gives none rather than fail the poll. */
  private Map<String, Object> sourceOffsetsNow() {
    try {
      return sourceOffsets.get();
    } catch (RuntimeException e) {
      return Map.of();
    }
  }

  /** The events dropped so far; a failed read (a bus being stopped) keeps the last count rather than fail the poll. */
  private long droppedSoFar() {
    try {
      droppedSeen = Math.max(droppedSeen, droppedEvents.getAsLong());
    } catch (RuntimeException e) {
      // The count is cumulative: the last one read is still a lower bound.
    }
    return droppedSeen;
  }

  // ---------------------------------------------------------------- executors

  @Override
  public synchronized void onExecutorAdded(SparkListenerExecutorAdded event) {
    if (DRIVER_ID.equals(event.executorId())) {
      return;
    }
    Executor before = executors.get(event.executorId());
    if (before != null && before.removedMs != null) {
      // The id registered again after its removal: its earlier life retires now, as an evicted removal does. Left in
      // removedOrder, it would evict the live executor 200 removals later.
      removedOrder.remove(event.executorId());
      executors.remove(event.executorId());
      retiredSlotMs += slotMs(before, before.removedMs);
    }
    Executor e = new Executor(executorsSeen++);
    e.host = event.executorInfo().executorHost();
    e.cores = event.executorInfo().totalCores();
    e.addedMs = event.time();
    executors.put(event.executorId(), e);
    executorsAdded++;
    if (firstExecutorCores == 0) {
      firstExecutorCores = e.cores;
    }
  }

  @Override
  public synchronized void onExecutorRemoved(SparkListenerExecutorRemoved event) {
    Executor e = executors.get(event.executorId());
    if (e == null || e.removedMs != null) {
      return;
    }
    markRemoved(event.executorId(), e, event.time(), event.reason());
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

  @Override
  public synchronized void onExecutorMetricsUpdate(SparkListenerExecutorMetricsUpdate event) {
    Executor e = executors.get(event.execId());
    if (e == null) {
      return; // the driver's own heartbeat, or an executor we no longer track
    }
    // Peaks since the last heartbeat, one entry per active stage (plus an executor-level one).
    long heap = -1;
    scala.collection.Iterator<ExecutorMetrics> it = event.executorUpdates().valuesIterator();
    while (it.hasNext()) {
      heap = Math.max(heap, it.next().getMetricValue("JVMHeapMemory"));
    }
    if (heap > 0) {
      e.heapUsedBytes = heap;
    }
  }

  // ---------------------------------------------------------------- jobs and stages

  @Override
  public synchronized void onJobStart(SparkListenerJobStart event) {
    Tag tag = tagOf(event.properties(), event.jobId());
    scala.collection.Iterator<StageInfo> it = event.stageInfos().iterator();
    while (it.hasNext()) {
      int stageId = it.next().stageId();
      stageJobs.put(stageId, event.jobId());
      if (tag != null) {
        stageTags.put(stageId, tag);
      }
    }
    if (tag != null) {
      jobTags.put(event.jobId(), tag);
    }
  }

  @Override
  public synchronized void onJobEnd(SparkListenerJobEnd event) {
    stageJobs.values().removeIf(job -> job == event.jobId());
    shuffleHolders.remove(event.jobId());
    otherStages.values().removeIf(s -> s.jobId() == event.jobId()); // a cancelled job's stages end with it
    Tag tag = jobTags.remove(event.jobId());
    if (tag == null) {
      return;
    }
    // Only drop stages still owned by this job: a stage can be shared with a later job.
    stageTags.values().removeIf(t -> t.jobId() == event.jobId());
    if (event.jobResult() != JobSucceeded$.MODULE$) {
      query(tag.queryId()).jobsFailed++;
    }
  }

  @Override
  public synchronized void onStageSubmitted(SparkListenerStageSubmitted event) {
    StageInfo info = event.stageInfo();
    Tag tag = stageTags.get(info.stageId());
    if (tag == null) {
      tag = tagOf(event.properties(), -1);
      if (tag == null) {
        long submitted = info.submissionTime().isDefined() ? (Long) info.submissionTime().get()
            : System.currentTimeMillis();
        otherStages.put(stageKey(info.stageId(), info.attemptNumber()),
            new OtherStage(stageJobs.getOrDefault(info.stageId(), -1), submitted, info.numTasks(), new BitSet()));
        return;
      }
    }
    // Only stages that really run count toward the useful-parallelism cap (skipped stages are never submitted).
    Query q = query(tag.queryId());
    q.stageTasks[q.stagesSeen % MAX_STAGES_PER_QUERY] = info.numTasks();
    q.stagesSeen++;
    if (tag.batchId() != null) {
      q.batch(tag.batchId(), ++changes).stages++;
    }
  }

  // ---------------------------------------------------------------- tasks

  @Override
  public synchronized void onTaskStart(SparkListenerTaskStart event) {
    TaskInfo info = event.taskInfo();
    if (DRIVER_ID.equals(info.executorId())) {
      return;
    }
    Executor e = executor(info.executorId(), info.host(), info.launchTime());
    e.runningTasks++;
    // The tag travels with the task: its end may arrive after the job has ended (e.g. speculative copies).
    Tag tag = stageTags.get(event.stageId());
    StageRun stage = runningStages.computeIfAbsent(stageKey(event.stageId(), event.stageAttemptId()),
        k -> new StageRun(event.stageId()));
    running.put(info.taskId(), new RunningTask(info.executorId(), info.launchTime(), tag, stage));
    if (tag != null && tag.batchId() != null) {
      Batch b = query(tag.queryId()).batch(tag.batchId(), ++changes);
      b.executors.set(e.index);
      if (b.firstLaunchMs < 0 || info.launchTime() < b.firstLaunchMs) {
        b.firstLaunchMs = info.launchTime();
      }
    }
  }

  @Override
  public synchronized void onStageCompleted(SparkListenerStageCompleted event) {
    StageInfo info = event.stageInfo();
    long done = info.completionTime().isDefined() ? (Long) info.completionTime().get() : System.currentTimeMillis();
    StageRun stage = runningStages.remove(stageKey(info.stageId(), info.attemptNumber()));
    if (stage != null) {
      stage.completedMs = done;
    }
    otherStages.remove(stageKey(info.stageId(), info.attemptNumber()));
  }

  @Override
  public synchronized void onTaskEnd(SparkListenerTaskEnd event) {
    TaskInfo info = event.taskInfo();
    TaskEndReason reason = event.reason();
    if (info == null || DRIVER_ID.equals(info.executorId())) {
      return;
    }
    if (reason == Resubmitted$.MODULE$) {
      // Bookkeeping for a task that had already succeeded (its shuffle output was lost): counted before. Spark runs it
      // again in the same stage attempt, so another job's task is demand again.
      OtherStage other = otherStages.get(stageKey(event.stageId(), event.stageAttemptId()));
      if (other != null) {
        other.succeeded().clear(info.index());
      }
      return;
    }
    RunningTask rt = running.remove(info.taskId());
    // Aged out as lost, yet here is its end: undo the age-out, and count only the busy time it did not count.
    AgedOut aged = rt == null ? agedOut.remove(info.taskId()) : null;
    if (aged != null) {
      tasksAgedOut--;
    }
    // Only an executor-added event or a task start tracks an executor: a late end (e.g. of a task whose executor's
    // removal was evicted since) would bring it back as live for good. Its task still counts in the totals.
    Executor e = executors.get(info.executorId());
    if (rt != null && e != null && e.runningTasks > 0) {
      e.runningTasks--;
      java.util.function.Consumer<String> hook = idleExecutors;
      if (e.runningTasks == 0 && hook != null) {
        hook.accept(info.executorId());
      }
    }
    Tag tag = rt != null && rt.tag() != null ? rt.tag()
        : aged != null && aged.tag() != null ? aged.tag() : stageTags.get(event.stageId());

    long finish = info.finishTime() > 0 ? info.finishTime() : System.currentTimeMillis();
    double busy = Math.max(0L, finish - info.launchTime());
    // The age-out counted part of it in the executor's, the query's and the total busy time (not the batch's).
    double more = aged == null ? busy : Math.max(0.0, busy - aged.busyMs());
    TaskMetrics m = event.taskMetrics();
    double gc = m != null ? m.jvmGCTime() : 0.0;
    double run = m != null ? m.executorRunTime() : 0.0;
    boolean ok = reason == Success$.MODULE$;
    // A task killed on purpose (a stopped query, a cancelled job, a speculative copy) is not a
    // failure: counting it would make checkers roll back healthy scalings.
    boolean killed = reason instanceof TaskKilled;

    if (e != null) {
      e.busyMs += more;
      e.gcMs += gc;
      e.runMs += run;
    }
    finishedBusyMs += more;
    gcMs += gc;
    runMs += run;
    if (ok) {
      if (e != null) {
        e.tasksFinished++;
      }
      tasksFinished++;
      OtherStage other = otherStages.get(stageKey(event.stageId(), event.stageAttemptId()));
      if (other != null) {
        other.succeeded().set(info.index()); // by index: a speculative copy's success is not a second one
      }
      Integer job = "ShuffleMapTask".equals(event.taskType()) ? stageJobs.get(event.stageId()) : null;
      if (job != null && e != null) {
        shuffleHolders.computeIfAbsent(job, j -> new Holders(finish, new HashSet<>())).executors()
            .add(info.executorId());
      }
    } else if (killed) {
      tasksKilled++;
    } else {
      if (e != null) {
        e.tasksFailed++;
      }
      tasksFailed++;
    }
    ExecutorMetrics peaks = event.taskExecutorMetrics();
    if (peaks != null && e != null) {
      long heap = peaks.getMetricValue("JVMHeapMemory");
      if (heap > 0) {
        e.heapUsedBytes = heap;
      }
    }

    if (tag != null) {
      Query q = query(tag.queryId());
      q.busyMs += more;
      q.runMs += run;
      if (ok) {
        q.tasksFinished++;
      } else if (!killed) {
        q.tasksFailed++;
      }
      if (tag.batchId() != null) {
        Batch b = q.batch(tag.batchId(), ++changes);
        b.busyMs += busy;
        b.tasks++;
        if (e != null) {
          b.executors.set(e.index);
        }
        b.lastEndMs = Math.max(b.lastEndMs, finish);
      }
    }
  }

  /**
   * Executors holding shuffle map output of a job that is still running: removing one now would fail the job's
   * tasks. Jobs that have ended by {@link #jobEnded} ({@code status}: the status store's word on a job, null when it
   * does not know it) are forgotten: a job end lost with dropped events must not pin executors forever.
   */
  public HashSet<String> shuffleHolders(IntFunction<JobExecutionStatus> status, long now) {
    int[] jobs;
    synchronized (this) {
      jobs = shuffleHolders.keySet().stream().mapToInt(Integer::intValue).toArray();
    }
    HashMap<Integer, JobExecutionStatus> known = statuses(jobs, status); // Spark's store, outside our lock
    synchronized (this) {
      shuffleHolders.entrySet().removeIf(j -> known.containsKey(j.getKey())
          && jobEnded(known.get(j.getKey()), j.getValue().sinceMs(), now));
      HashSet<String> out = new HashSet<>();
      for (Holders holders : shuffleHolders.values()) {
        out.addAll(holders.executors());
      }
      return out;
    }
  }

  /**
   * Forgets the stages of other jobs that have ended by {@link #jobEnded} ({@code status} as for
   * {@link #shuffleHolders}): their stage-completed and job-end events were lost (a full listener queue), and their
   * tasks would count as demand for ever.
   */
  public void forgetOtherStages(IntFunction<JobExecutionStatus> status, long now) {
    int[] jobs;
    synchronized (this) {
      jobs = otherStages.values().stream().mapToInt(OtherStage::jobId).distinct().toArray();
    }
    HashMap<Integer, JobExecutionStatus> known = statuses(jobs, status);
    synchronized (this) {
      otherStages.values().removeIf(s -> known.containsKey(s.jobId()) && jobEnded(known.get(s.jobId()), s.sinceMs(),
          now));
    }
  }

  /**
   * Whether a job has ended, by the status store's word on it ({@code known}, null when it does not know the job)
   * and when the listener first recorded it ({@code sinceMs}). The status store answers from its own queue, which
   * can lag this listener's: a job it does not know yet still runs. But it also forgets ended jobs
   * (spark.ui.retainedJobs: seconds of them at a hundred jobs a second), and job ends can be dropped: a job it does
   * not know {@link #AGE_OUT_MS} after the listener recorded it has ended. One rule for both callers, so that no job
   * is "running" to one and "ended" to the other.
   */
  static boolean jobEnded(JobExecutionStatus known, long sinceMs, long now) {
    if (known == JobExecutionStatus.SUCCEEDED || known == JobExecutionStatus.FAILED) {
      return true;
    }
    if (known == JobExecutionStatus.RUNNING) {
      return false;
    }
    return now - sinceMs > AGE_OUT_MS; // not known (or UNKNOWN)
  }

  /** The status store's word on each of these jobs (null: not known; a job id below 0 is never known). */
  private static HashMap<Integer, JobExecutionStatus> statuses(int[] jobs, IntFunction<JobExecutionStatus> status) {
    HashMap<Integer, JobExecutionStatus> known = new HashMap<>();
    for (int job : jobs) {
      known.put(job, job < 0 ? null : status.apply(job));
    }
    return known;
  }

  // ---------------------------------------------------------------- snapshot

  /** One consistent view of all counters; times are epoch ms, durations ms, counters cumulative. */
  public Map<String, Object> snapshot(String appId) {
    return snapshot(appId, System.currentTimeMillis());
  }

  /** {@link #snapshot(String)} as of {@code now} (epoch ms). */
  public Map<String, Object> snapshot(String appId, long now) {
    return snapshot(appId, now, -1);
  }

  /**
   * {@link #snapshot(String)} with only the batches that changed after change count {@code batchesSince} (the
   * {@code changes} of an earlier snapshot of this listener; -1: all): the reader keeps the others from before.
   */
  public Map<String, Object> snapshot(String appId, long now, long batchesSince) {
    // Spark's views first, outside the lock: the listener's thread takes it for every event.
    Set<String> listed = readOrNull(listedExecutors);
    Set<Integer> active = readOrNull(activeStages);
    Map<String, Object> out = view(capture(now, batchesSince, listed, active), appId, droppedSoFar());
    out.put("sourceOffsets", sourceOffsetsNow());
    return out;
  }

  /** An executor's counters as {@link #capture} copied them. */
  record ExecutorState(String id, String host, int cores, long addedMs, Long removedMs, String removedReason,
      int runningTasks, int liveShuffleJobs, double busyMs, long tasksFinished, long tasksFailed, double gcMs,
      double runMs, long heapUsedBytes) {
  }

  /** A micro-batch's counters as {@link #capture} copied them (see BatchTasks in snapshot-schema.json). */
  record BatchState(String id, double busyMs, long tasks, int executors, long firstLaunchMs, long lastEndMs,
      int stages) {
  }

  /** A query's counters and its recent batches as {@link #capture} copied them. */
  record QueryState(String id, double busyMs, long tasksFinished, long tasksFailed, double runMs, long jobsFailed,
      int maxStageTasks, List<BatchState> batches) {
  }

  /**
   * What a snapshot reads under the listener's lock: values only. Turning them into maps (and JSON) happens after the
   * lock is released, so a poll holds up the listener's queue for the copying alone.
   */
  public record State(long timeMs, int coresPerExecutor, long heapMaxBytes, List<ExecutorState> executors,
      Map<String, Object> totals, List<QueryState> queries, int otherTasks, String listenerId, long changes,
      long batchesSince) {
  }

  /**
   * The counters as of {@code now} (epoch ms), copied under the lock, with the batches changed after change count
   * {@code batchesSince} (-1: all); {@link #view} makes the snapshot of them.
   */
  public State capture(long now, long batchesSince) {
    return capture(now, batchesSince, null, null);
  }

  /**
   * {@link #capture(long, long)}, first catching up, with Spark's own views, on what dropped events left behind (null:
   * that view is unknown). {@code listed}, the executors the scheduler backend lists: an executor it has not listed for
   * {@link #AGE_OUT_MS} was removed, its removal event lost (the backend drops an executor before it posts the event).
   * {@code active}, the stages the status store lists as active: a task running for {@link #AGE_OUT_MS} whose stage it
   * does not list lost its end and its stage's completion both (younger ones may be ahead of the store's queue).
   */
  public synchronized State capture(long now, long batchesSince, Set<String> listed, Set<Integer> active) {
    if (listed != null) {
      List<String> gone = new ArrayList<>();
      for (Map.Entry<String, Executor> entry : executors.entrySet()) {
        Executor e = entry.getValue();
        if (e.removedMs != null || listed.contains(entry.getKey())) {
          e.unlistedSinceMs = -1;
        } else if (e.unlistedSinceMs < 0) {
          e.unlistedSinceMs = now;
        } else if (now - e.unlistedSinceMs >= AGE_OUT_MS) {
          gone.add(entry.getKey());
        }
      }
      for (String id : gone) {
        // Removed now, not when it was first found unlisted: its slot time was reported up to now already.
        markRemoved(id, executors.get(id), now, UNLISTED_REASON);
      }
    }
    // Elapsed part of running tasks, per executor (by index) and per query, in one pass that also forgets the tasks
    // whose end event was lost: after dropped events they may be tens of thousands.
    double[] inflightByExec = new double[executorsSeen];
    HashMap<String, double[]> inflightByQuery = new HashMap<>();
    double inflight = 0;
    for (Iterator<Map.Entry<Long, RunningTask>> it = running.entrySet().iterator(); it.hasNext(); ) {
      Map.Entry<Long, RunningTask> entry = it.next();
      RunningTask rt = entry.getValue();
      Executor e = executors.get(rt.executorId());
      long end = lastPossibleEnd(rt, e, now);
      double elapsed = Math.max(0L, end - rt.launchMs());
      boolean stageGone = end == now && active != null && now - rt.launchMs() >= AGE_OUT_MS
          && !active.contains(rt.stage().stageId);
      if (end != now && now - end >= AGE_OUT_MS || stageGone) {
        it.remove();
        ageOut(entry.getKey(), rt, e, elapsed);
        continue;
      }
      inflight += elapsed;
      if (e != null) {
        inflightByExec[e.index] += elapsed;
      }
      if (rt.tag() != null) {
        inflightByQuery.computeIfAbsent(rt.tag().queryId(), q -> new double[1])[0] += elapsed;
      }
    }
    // Running jobs with shuffle output per executor, counted in one pass over the jobs.
    HashMap<String, Integer> shuffleJobs = new HashMap<>();
    for (Holders holders : shuffleHolders.values()) {
      for (String id : holders.executors()) {
        shuffleJobs.merge(id, 1, Integer::sum);
      }
    }

    List<ExecutorState> execs = new ArrayList<>(executors.size());
    double slotMs = retiredSlotMs;
    for (Map.Entry<String, Executor> entry : executors.entrySet()) {
      String id = entry.getKey();
      Executor e = entry.getValue();
      slotMs += slotMs(e, now);
      execs.add(new ExecutorState(id, e.host, e.cores, e.addedMs, e.removedMs, e.removedReason, e.runningTasks,
          shuffleJobs.getOrDefault(id, 0), e.busyMs + inflightByExec[e.index], e.tasksFinished,
          e.tasksFailed, e.gcMs, e.runMs, e.heapUsedBytes));
    }

    Map<String, Object> totals = new LinkedHashMap<>();
    totals.put("slotMs", slotMs);
    totals.put("busyMs", finishedBusyMs + inflight);
    totals.put("tasksFinished", tasksFinished);
    totals.put("tasksFailed", tasksFailed);
    totals.put("tasksKilled", tasksKilled);
    totals.put("tasksAgedOut", tasksAgedOut);
    totals.put("gcMs", gcMs);
    totals.put("runMs", runMs);
    totals.put("executorsAdded", executorsAdded);
    totals.put("executorsRemoved", executorsRemoved);

    List<QueryState> qs = new ArrayList<>(queries.size());
    for (Map.Entry<String, Query> entry : queries.entrySet()) {
      Query q = entry.getValue();
      int maxStageTasks = 0;
      for (int i = 0; i < Math.min(q.stagesSeen, MAX_STAGES_PER_QUERY); i++) {
        maxStageTasks = Math.max(maxStageTasks, q.stageTasks[i]);
      }
      List<BatchState> batches = new ArrayList<>(q.batches.size());
      for (Map.Entry<String, Batch> b : q.batches.entrySet()) {
        Batch batch = b.getValue();
        if (batch.change <= batchesSince) {
          continue;
        }
        batches.add(new BatchState(b.getKey(), batch.busyMs, batch.tasks, batch.executors.cardinality(),
            batch.firstLaunchMs, batch.lastEndMs, batch.stages));
      }
      double[] runningMs = inflightByQuery.get(entry.getKey());
      qs.add(new QueryState(entry.getKey(), q.busyMs + (runningMs == null ? 0.0 : runningMs[0]),
          q.tasksFinished, q.tasksFailed, q.runMs, q.jobsFailed, maxStageTasks, batches));
    }

    int otherTasks = 0;
    for (OtherStage stage : otherStages.values()) {
      otherTasks += stage.left();
    }
    return new State(now, coresPerExecutor(), heapMaxBytes, execs, totals, qs, otherTasks, listenerId, changes,
        batchesSince);
  }

  /**
   * The snapshot (see snapshot-schema.json) of what {@link #capture} copied; needs no lock. Executors go as a table,
   * one row each, its id first, then its fields in their declared order: at 1,000 executors the field names repeated
   * in every object were three quarters of a poll's JSON, and what py4j carries and Python parses grows with it.
   */
  public static Map<String, Object> view(State state, String appId, long listenerEventsDropped) {
    List<Object[]> execs = new ArrayList<>(state.executors().size());
    for (ExecutorState e : state.executors()) {
      execs.add(new Object[] {e.id(), e.host(), e.cores(), e.addedMs(), e.removedMs(), e.removedReason(),
          e.runningTasks(), e.liveShuffleJobs(), e.busyMs(), e.tasksFinished(), e.tasksFailed(), e.gcMs(), e.runMs(),
          e.heapUsedBytes(), state.heapMaxBytes()});
    }

    Map<String, Object> qs = new LinkedHashMap<>();
    for (QueryState q : state.queries()) {
      Map<String, Object> x = new LinkedHashMap<>();
      x.put("busyMs", q.busyMs());
      x.put("tasksFinished", q.tasksFinished());
      x.put("tasksFailed", q.tasksFailed());
      x.put("runMs", q.runMs());
      x.put("jobsFailed", q.jobsFailed());
      x.put("maxStageTasks", q.maxStageTasks());
      Map<String, Object> batches = new LinkedHashMap<>();
      for (BatchState b : q.batches()) {
        Map<String, Object> y = new LinkedHashMap<>();
        y.put("busyMs", b.busyMs());
        y.put("tasks", b.tasks());
        y.put("executors", b.executors());
        y.put("firstLaunchMs", b.firstLaunchMs() < 0 ? null : b.firstLaunchMs());
        y.put("lastEndMs", b.lastEndMs() < 0 ? null : b.lastEndMs());
        y.put("stages", b.stages());
        batches.put(b.id(), y);
      }
      x.put("batches", batches);
      qs.put(q.id(), x);
    }

    Map<String, Object> out = new LinkedHashMap<>();
    out.put("timeMs", state.timeMs());
    out.put("appId", appId);
    out.put("coresPerExecutor", state.coresPerExecutor());
    out.put("executors", execs);
    out.put("totals", state.totals());
    out.put("queries", qs);
    out.put("otherTasks", state.otherTasks());
    out.put("listenerEventsDropped", listenerEventsDropped);
    out.put("listenerId", state.listenerId());
    out.put("changes", state.changes());
    out.put("batchesSince", state.batchesSince());
    out.put("batchesPerQuery", MAX_BATCHES_PER_QUERY);
    return out;
  }

  synchronized int coresPerExecutor() {
    if (confCoresPerExecutor > 0) {
      return confCoresPerExecutor;
    }
    return firstExecutorCores > 0 ? firstExecutorCores : 1;
  }

  // ---------------------------------------------------------------- helpers

  /**
   * A running task ended at the latest when its stage completed or its executor ({@code e}, null when no longer
   * tracked) was removed.
   */
  private long lastPossibleEnd(RunningTask rt, Executor e, long now) {
    long end = now;
    if (e != null && e.removedMs != null) {
      end = Math.min(end, e.removedMs);
    }
    long stageDone = rt.stage().completedMs;
    return stageDone >= 0 ? Math.min(end, stageDone) : end;
  }

  /**
   * Counts a running task whose end event was lost (see {@link #AGE_OUT_MS}) as ended, in tasksAgedOut. Its time up to
   * the last possible end ({@code busy}) stays in the busy counters, so that they never go down; tasksAgedOut does
   * when the end comes after all (see {@link #MAX_AGED_OUT_TASKS}).
   */
  private void ageOut(long taskId, RunningTask rt, Executor e, double busy) {
    tasksAgedOut++;
    agedOut.put(taskId, new AgedOut(rt.tag(), busy));
    finishedBusyMs += busy;
    if (e != null) {
      e.busyMs += busy;
      if (e.runningTasks > 0) {
        e.runningTasks--;
      }
    }
    if (rt.tag() != null) {
      query(rt.tag().queryId()).busyMs += busy;
    }
  }

  private static double slotMs(Executor e, long now) {
    long end = e.removedMs != null ? Math.min(now, e.removedMs) : now;
    return (double) e.cores * Math.max(0L, end - e.addedMs);
  }

  private static Tag tagOf(Properties props, int jobId) {
    if (props == null) {
      return null;
    }
    String queryId = props.getProperty(QUERY_ID_KEY);
    if (queryId == null || queryId.isEmpty()) {
      return null;
    }
    return new Tag(queryId, props.getProperty(BATCH_ID_KEY), jobId);
  }

  private Query query(String queryId) {
    Query q = queries.get(queryId); // access order: marks the query as recently active
    if (q == null) {
      q = new Query();
      queries.put(queryId, q);
    }
    return q;
  }

  /** An executor we missed the added event of (a dropped event): track it from its first task's start. */
  private Executor executor(String id, String host, long seenMs) {
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
}
