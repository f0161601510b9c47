package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Properties;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.JobExecutionStatus;
import org.apache.spark.SparkConf;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The listener's bookkeeping, fed synthetic scheduler events (see {@link Events}) and read through its snapshot
 * as Python reads it (JSON). Times are epoch ms from T0.
 */
class SparkscaleListenerTest {
  static final long T0 = 1_700_000_000_000L;
  static final String Q1 = "11111111-1111-1111-1111-111111111111";
  static final String Q2 = "22222222-2222-2222-2222-222222222222";
  private static final ObjectMapper JSON = new ObjectMapper();

  private SparkscaleListener listener;
  private Events events;

  @BeforeEach
  void setUp() {
    listener = new SparkscaleListener(new SparkConf(false).set("spark.executor.memory", "2g"));
    events = new Events(listener);
  }

  /** The snapshot at {@code atMs}, its executors by id (SnapshotContractTest checks the table they come in). */
  private JsonNode snapshot(long atMs) {
    return byId(JSON.valueToTree(listener.snapshot("app-1", atMs)));
  }

  private static JsonNode byId(JsonNode snapshot) {
    try {
      return SnapshotContractTest.withExecutorsById(snapshot);
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  private static JsonNode executor(JsonNode snap, String id) {
    JsonNode e = snap.get("executors").get(id);
    assertTrue(e != null, "executor " + id + " in " + snap.get("executors"));
    return e;
  }

  // ---------------------------------------------------------------- executors

  @Test
  void executorsAreTrackedFromAddedToRemovedWithTheirReason() {
    events.executorAdded("driver", 4, T0) // the driver is no executor
        .executorAdded("1", 4, T0)
        .executorAdded("2", 4, T0 + 1_000)
        .executorRemoved("2", T0 + 5_000, "Executor killed by driver.")
        .executorRemoved("2", T0 + 6_000, "a second removal is ignored")
        .executorRemoved("9", T0 + 6_000, "never added: ignored");
    JsonNode snap = snapshot(T0 + 10_000);

    assertEquals(T0 + 10_000, snap.get("timeMs").asLong());
    assertEquals("app-1", snap.get("appId").asText());
    assertEquals(Set.of("1", "2"), fieldNames(snap.get("executors")));
    JsonNode live = executor(snap, "1");
    assertEquals("host-1", live.get("host").asText());
    assertEquals(4, live.get("cores").asInt());
    assertEquals(T0, live.get("addedMs").asLong());
    assertTrue(live.get("removedMs").isNull());
    assertTrue(live.get("removedReason").isNull());
    assertEquals(-1, live.get("heapUsedBytes").asLong()); // no heartbeat yet
    assertEquals(2L << 30, live.get("heapMaxBytes").asLong()); // spark.executor.memory
    JsonNode removed = executor(snap, "2");
    assertEquals(T0 + 5_000, removed.get("removedMs").asLong());
    assertEquals("Executor killed by driver.", removed.get("removedReason").asText());

    JsonNode totals = snap.get("totals");
    assertEquals(2, totals.get("executorsAdded").asLong());
    assertEquals(1, totals.get("executorsRemoved").asLong());
    // Slot time: cores x time registered, a removed executor only until its removal.
    assertEquals(4 * 10_000.0 + 4 * 4_000.0, totals.get("slotMs").asDouble());
    assertEquals(4, snap.get("coresPerExecutor").asInt()); // unset in the conf: the first executor's
  }

  @Test
  void onlyTheLatestRemovedExecutorsAreKeptButTheirSlotTimeStays() {
    int n = SparkscaleListener.MAX_REMOVED_EXECUTORS + 5;
    for (int i = 0; i < n; i++) {
      events.executorAdded(Integer.toString(i), 1, T0).executorRemoved(Integer.toString(i), T0 + 1_000, "lost");
    }
    JsonNode snap = snapshot(T0 + 2_000);
    assertEquals(SparkscaleListener.MAX_REMOVED_EXECUTORS, snap.get("executors").size());
    assertFalse(snap.get("executors").has("0")); // the oldest removals went first
    assertTrue(snap.get("executors").has(Integer.toString(n - 1)));
    assertEquals(n * 1_000.0, snap.get("totals").get("slotMs").asDouble());
    assertEquals(n, snap.get("totals").get("executorsRemoved").asLong());
  }

  @Test
  void anExecutorTheSchedulerHasNotListedForTheAgeOutPeriodIsTakenAsRemoved() {
    // Its removal event was dropped (a full queue): it would count as live for the application's life.
    Set<String> listed = new java.util.HashSet<>(Set.of("1", "2"));
    listener.listExecutorsWith(() -> listed);
    events.executorAdded("1", 1, T0).executorAdded("2", 1, T0);
    snapshot(T0 + 1_000);
    listed.remove("2"); // the backend has dropped it; the event never comes
    snapshot(T0 + 2_000);
    assertTrue(listener.live("2")); // the backend is ahead of the listener: its removal may be on its way
    JsonNode snap = snapshot(T0 + 2_000 + SparkscaleListener.AGE_OUT_MS);
    assertFalse(listener.live("2"));
    assertTrue(listener.live("1"));
    JsonNode gone = executor(snap, "2");
    assertEquals(T0 + 2_000 + SparkscaleListener.AGE_OUT_MS, gone.get("removedMs").asLong()); // slots counted so far
    assertEquals(SparkscaleListener.UNLISTED_REASON, gone.get("removedReason").asText());
    assertEquals(1, snap.get("totals").get("executorsRemoved").asLong());
    events.executorRemoved("2", T0 + 1_500, "Executor killed by driver."); // late after all: counted once
    assertEquals(1, snapshot(T0 + 40_000).get("totals").get("executorsRemoved").asLong());
    listener.listExecutorsWith(() -> {
      throw new IllegalStateException("context stopped");
    });
    snapshot(T0 + 100_000); // a failed read concludes nothing
    assertTrue(listener.live("1"));
  }

  @Test
  void aLateTaskEndDoesNotBringBackAnExecutorWhoseRemovalWasForgotten() {
    // Removed while its task ran, its removal evicted by 200 more (a mass loss) before the task's end came.
    events.executorAdded("1", 1, T0);
    TaskInfo t = events.taskStart(1, 1, 0, "1", T0);
    events.executorRemoved("1", T0 + 1_000, "node lost");
    for (int i = 0; i < SparkscaleListener.MAX_REMOVED_EXECUTORS; i++) {
      events.executorAdded("x" + i, 1, T0).executorRemoved("x" + i, T0 + 1_000, "node lost");
    }
    events.taskEnd(1, "ResultTask", Events.failed(), t, T0 + 1_100, Events.metrics(0, 0)); // ExecutorLostFailure
    assertEquals(0, listener.liveExecutorsExcept(Set.of()));
    JsonNode snap = snapshot(T0 + 2_000);
    assertFalse(snap.get("executors").has("1"));
    assertEquals(1, snap.get("totals").get("tasksFailed").asLong()); // the task still counts
    assertEquals(1 + SparkscaleListener.MAX_REMOVED_EXECUTORS, snap.get("totals").get("executorsAdded").asLong());
  }

  @Test
  void anExecutorIdRegisteredAgainAfterItsRemovalStaysLiveThroughLaterRemovals() {
    events.executorAdded("1", 1, T0).executorRemoved("1", T0 + 1_000, "lost").executorAdded("1", 1, T0 + 2_000);
    for (int i = 0; i < SparkscaleListener.MAX_REMOVED_EXECUTORS; i++) {
      events.executorAdded("x" + i, 1, T0 + 3_000).executorRemoved("x" + i, T0 + 4_000, "lost");
    }
    assertTrue(listener.live("1"));
    JsonNode snap = snapshot(T0 + 5_000);
    assertTrue(executor(snap, "1").get("removedMs").isNull());
    // Both of its lives, and the others'.
    assertEquals(1_000.0 + 3_000.0 + SparkscaleListener.MAX_REMOVED_EXECUTORS * 1_000.0,
        snap.get("totals").get("slotMs").asDouble());
  }

  @Test
  void coresPerExecutorComesFromTheConfWhenSet() {
    SparkscaleListener l = new SparkscaleListener(new SparkConf(false).set("spark.executor.cores", "3"));
    new Events(l).executorAdded("1", 8, T0);
    assertEquals(3, JSON.valueToTree(l.snapshot("app", T0)).get("coresPerExecutor").asInt());
    SparkscaleListener none = new SparkscaleListener(new SparkConf(false));
    assertEquals(1, JSON.valueToTree(none.snapshot("app", T0)).get("coresPerExecutor").asInt());
  }

  @Test
  void anExecutorWhoseAddedEventWasLostIsTrackedFromItsFirstTask() {
    events.executorAdded("1", 2, T0);
    TaskInfo t = events.taskStart(0, 1, 0, "7", T0 + 3_000);
    JsonNode snap = snapshot(T0 + 4_000);
    JsonNode e = executor(snap, "7");
    assertEquals(T0 + 3_000, e.get("addedMs").asLong());
    assertEquals(2, e.get("cores").asInt()); // as the others
    assertEquals(1, e.get("runningTasks").asInt());
    assertEquals(2, snap.get("totals").get("executorsAdded").asLong());
    events.taskSucceeded(0, t, T0 + 5_000);
    assertEquals(0, executor(snapshot(T0 + 6_000), "7").get("runningTasks").asInt());
  }

  @Test
  void anExecutorIsReportedIdleWhenItsLastRunningTaskEndsNotBefore() {
    ArrayList<String> idle = new ArrayList<>();
    listener.reportIdleExecutorsTo(idle::add);
    events.executorAdded("1", 2, T0).executorAdded("2", 2, T0);
    assertTrue(listener.idle("1"));
    assertFalse(listener.idle("9")); // unknown
    TaskInfo a = events.taskStart(0, 1, 0, "1", T0 + 1_000);
    TaskInfo b = events.taskStart(0, 2, 1, "1", T0 + 1_000);
    TaskInfo c = events.taskStart(0, 3, 2, "2", T0 + 1_000);
    assertFalse(listener.idle("1"));
    events.taskSucceeded(0, a, T0 + 2_000);
    assertEquals(java.util.List.of(), idle); // b still runs on 1
    events.taskSucceeded(0, b, T0 + 2_500).taskSucceeded(0, c, T0 + 3_000);
    assertEquals(java.util.List.of("1", "2"), idle);
    assertTrue(listener.idle("1"));
    events.executorRemoved("2", T0 + 4_000, "Executor killed by driver.");
    assertFalse(listener.idle("2")); // gone is not idle
  }

  @Test
  void heapUseComesFromHeartbeatsAndTaskEnds() {
    events.executorAdded("1", 1, T0).heartbeat("1", 300L << 20).heartbeat("driver", 1L << 30);
    assertEquals(300L << 20, executor(snapshot(T0), "1").get("heapUsedBytes").asLong());
    TaskInfo t = events.taskStart(0, 1, 0, "1", T0);
    t.finishTime_$eq(T0 + 10);
    listener.onTaskEnd(new org.apache.spark.scheduler.SparkListenerTaskEnd(0, 0, "ResultTask", Events.success(), t,
        Events.heap(500L << 20), Events.metrics(5, 1)));
    assertEquals(500L << 20, executor(snapshot(T0 + 20), "1").get("heapUsedBytes").asLong());
  }

  // ---------------------------------------------------------------- busy time

  @Test
  void busyTimeIsAttributedToExecutorQueryAndBatch() {
    events.executorAdded("1", 2, T0).executorAdded("2", 2, T0);
    StageInfo stage = Events.stage(10, 0, 3);
    Properties batch0 = Events.microBatch(Q1, "0");
    events.jobStart(5, T0 + 100, batch0, stage).stageSubmitted(stage, batch0);
    TaskInfo a = events.taskStart(10, 100, 0, "1", T0 + 1_000);
    TaskInfo b = events.taskStart(10, 101, 1, "2", T0 + 1_000);
    TaskInfo c = events.taskStart(10, 102, 2, "1", T0 + 2_000);
    events.taskEnd(10, "ResultTask", Events.success(), a, T0 + 1_400, Events.metrics(350, 20));
    events.taskEnd(10, "ResultTask", Events.success(), b, T0 + 1_600, Events.metrics(550, 0));

    // c still runs: its elapsed time counts toward its executor, its query and the totals, not its batch yet.
    JsonNode snap = snapshot(T0 + 2_500);
    assertEquals(400.0 + 500.0, executor(snap, "1").get("busyMs").asDouble());
    assertEquals(600.0, executor(snap, "2").get("busyMs").asDouble());
    assertEquals(1, executor(snap, "1").get("runningTasks").asInt());
    assertEquals(0, executor(snap, "2").get("runningTasks").asInt());
    assertEquals(1, executor(snap, "1").get("tasksFinished").asLong());
    assertEquals(350.0, executor(snap, "1").get("runMs").asDouble());
    assertEquals(20.0, executor(snap, "1").get("gcMs").asDouble());
    JsonNode q = snap.get("queries").get(Q1);
    assertEquals(400.0 + 600.0 + 500.0, q.get("busyMs").asDouble());
    assertEquals(2, q.get("tasksFinished").asLong());
    assertEquals(900.0, q.get("runMs").asDouble());
    assertEquals(3, q.get("maxStageTasks").asInt());
    assertEquals(1_000.0, q.get("batches").get("0").get("busyMs").asDouble());
    JsonNode totals = snap.get("totals");
    assertEquals(1_500.0, totals.get("busyMs").asDouble());
    assertEquals(2, totals.get("tasksFinished").asLong());
    assertEquals(900.0, totals.get("runMs").asDouble());
    assertEquals(20.0, totals.get("gcMs").asDouble());

    events.taskSucceeded(10, c, T0 + 3_000).stageCompleted(stage, T0 + 3_000).jobEnd(5, T0 + 3_000);
    snap = snapshot(T0 + 9_000);
    assertEquals(2_000.0, snap.get("queries").get(Q1).get("batches").get("0").get("busyMs").asDouble());
    assertEquals(2_000.0, snap.get("queries").get(Q1).get("busyMs").asDouble());
    assertEquals(2_000.0, snap.get("totals").get("busyMs").asDouble()); // nothing runs: no growth
    assertEquals(0, executor(snap, "1").get("runningTasks").asInt());
  }

  @Test
  void eachBatchTellsItsTasksExecutorsStagesAndSpan() {
    events.executorAdded("1", 2, T0).executorAdded("2", 2, T0).executorAdded("3", 2, T0);
    // Batch 4 of Q1: a map stage of 3 tasks on executors 1 and 2, then a reduce stage of 1 task on 2.
    Properties batch4 = Events.microBatch(Q1, "4");
    StageInfo map = Events.stage(20, 0, 3);
    StageInfo reduce = Events.stage(21, 0, 1);
    events.jobStart(9, T0, batch4, map, reduce).stageSubmitted(map, batch4);
    TaskInfo m1 = events.taskStart(20, 1, 0, "1", T0 + 1_000);
    TaskInfo m2 = events.taskStart(20, 2, 1, "2", T0 + 1_050);
    JsonNode started = snapshot(T0 + 1_100).get("queries").get(Q1).get("batches").get("4");
    assertEquals(T0 + 1_000, started.get("firstLaunchMs").asLong());
    assertTrue(started.get("lastEndMs").isNull()); // no task ended yet
    assertEquals(0, started.get("tasks").asLong());
    assertEquals(2, started.get("executors").asInt()); // where its tasks run, ended or not
    TaskInfo m3 = events.taskStart(20, 3, 2, "1", T0 + 1_200);
    events.taskEnd(20, "ShuffleMapTask", Events.success(), m1, T0 + 1_300, Events.metrics(250, 0))
        .taskEnd(20, "ShuffleMapTask", Events.failed(), m2, T0 + 1_350, null)
        .taskEnd(20, "ShuffleMapTask", Events.success(), m3, T0 + 1_500, Events.metrics(250, 0))
        .stageCompleted(map, T0 + 1_500)
        .stageSubmitted(reduce, batch4);
    TaskInfo r = events.taskStart(21, 4, 0, "2", T0 + 1_600);
    events.taskSucceeded(21, r, T0 + 1_900).stageCompleted(reduce, T0 + 1_900).jobEnd(9, T0 + 1_900);
    // Batch 5 runs on executor 3 alone; a job of Q1 outside any batch counts for no batch.
    Properties batch5 = Events.microBatch(Q1, "5");
    StageInfo next = Events.stage(22, 0, 1);
    events.jobStart(10, T0 + 2_000, batch5, next).stageSubmitted(next, batch5);
    events.taskSucceeded(22, events.taskStart(22, 5, 0, "3", T0 + 2_000), T0 + 2_100);
    Properties noBatch = Events.microBatch(Q1, null);
    StageInfo other = Events.stage(23, 0, 1);
    events.jobStart(11, T0 + 2_000, noBatch, other).stageSubmitted(other, noBatch);
    events.taskSucceeded(23, events.taskStart(23, 6, 0, "3", T0 + 2_000), T0 + 2_500);

    JsonNode q = snapshot(T0 + 3_000).get("queries").get(Q1);
    JsonNode b4 = q.get("batches").get("4");
    assertEquals(300.0 + 300.0 + 300.0 + 300.0, b4.get("busyMs").asDouble());
    assertEquals(4, b4.get("tasks").asLong()); // the failed one too: its time is in busyMs
    assertEquals(2, b4.get("executors").asInt());
    assertEquals(T0 + 1_000, b4.get("firstLaunchMs").asLong());
    assertEquals(T0 + 1_900, b4.get("lastEndMs").asLong());
    assertEquals(2, b4.get("stages").asInt());
    JsonNode b5 = q.get("batches").get("5");
    assertEquals(100.0, b5.get("busyMs").asDouble());
    assertEquals(1, b5.get("executors").asInt());
    assertEquals(1, b5.get("stages").asInt());
    assertEquals(Set.of("4", "5"), fieldNames(q.get("batches")));
    assertEquals(1_200.0 + 100.0 + 500.0, q.get("busyMs").asDouble());
  }

  @Test
  void jobsWhoseEndsWereLostAreForgottenBeyondABound() {
    // Every job's end event dropped (a full listener queue): the eldest are forgotten, the newest still count.
    events.executorAdded("1", 1, T0);
    int jobs = SparkscaleListener.MAX_RUNNING_JOBS + 50;
    for (int j = 0; j < jobs; j++) {
      StageInfo stage = Events.stage(j, 0, 1);
      Properties props = Events.microBatch(Q1, Integer.toString(j));
      events.jobStart(j, T0, props, stage).stageSubmitted(stage, props);
    }
    int[] tracked = listener.trackedJobsAndStages();
    assertEquals(SparkscaleListener.MAX_RUNNING_JOBS, tracked[0]);
    assertEquals(SparkscaleListener.MAX_RUNNING_STAGES, tracked[1]);
    assertEquals(SparkscaleListener.MAX_RUNNING_STAGES, tracked[2]);
    int last = jobs - 1;
    TaskInfo t = events.taskStart(last, 1, 0, "1", T0);
    events.taskSucceeded(last, t, T0 + 300).jobEnd(last, T0 + 300);
    JsonNode q = snapshot(T0 + 1_000).get("queries").get(Q1);
    assertEquals(300.0, q.get("batches").get(Integer.toString(last)).get("busyMs").asDouble());
    assertEquals(SparkscaleListener.MAX_RUNNING_JOBS - 1, listener.trackedJobsAndStages()[0]);
  }

  @Test
  void aJobOutsideEveryStreamingQueryCountsForTheExecutorsOnly() {
    events.executorAdded("1", 1, T0);
    StageInfo stage = Events.stage(1, 0, 1);
    events.jobStart(1, T0, null, stage).stageSubmitted(stage, null);
    TaskInfo t = events.taskStart(1, 1, 0, "1", T0);
    events.taskSucceeded(1, t, T0 + 700).jobEnd(1, T0 + 700);
    JsonNode snap = snapshot(T0 + 1_000);
    assertEquals(700.0, executor(snap, "1").get("busyMs").asDouble());
    assertEquals(0, snap.get("queries").size());
  }

  @Test
  void aTaskEndingAfterItsJobStillCountsForItsQuery() {
    // A speculative copy, say: its end arrives after the job has ended and its tags are gone.
    events.executorAdded("1", 1, T0);
    StageInfo stage = Events.stage(3, 0, 1);
    Properties props = Events.microBatch(Q1, "7");
    events.jobStart(3, T0, props, stage).stageSubmitted(stage, props);
    TaskInfo t = events.taskStart(3, 1, 0, "1", T0);
    events.jobEnd(3, T0 + 100).taskSucceeded(3, t, T0 + 300);
    JsonNode q = snapshot(T0 + 1_000).get("queries").get(Q1);
    assertEquals(300.0, q.get("busyMs").asDouble());
    assertEquals(300.0, q.get("batches").get("7").get("busyMs").asDouble());
  }

  @Test
  void failuresAndKillsAreToldApartAndResubmissionsNotCountedTwice() {
    events.executorAdded("1", 1, T0);
    StageInfo stage = Events.stage(1, 0, 4);
    Properties props = Events.microBatch(Q1, "0");
    events.jobStart(1, T0, props, stage).stageSubmitted(stage, props);
    TaskInfo ok = events.taskStart(1, 1, 0, "1", T0);
    events.taskSucceeded(1, ok, T0 + 100);
    events.taskEnd(1, "ShuffleMapTask", Events.resubmitted(), ok, T0 + 200, null); // bookkeeping only
    TaskInfo lost = events.taskStart(1, 2, 1, "1", T0);
    events.taskEnd(1, "ResultTask", Events.failed(), lost, T0 + 100, null);
    TaskInfo killed = events.taskStart(1, 3, 2, "1", T0);
    events.taskEnd(1, "ResultTask", Events.killed(), killed, T0 + 100, null);
    events.jobFailed(1, T0 + 200);

    JsonNode snap = snapshot(T0 + 1_000);
    JsonNode totals = snap.get("totals");
    assertEquals(1, totals.get("tasksFinished").asLong());
    assertEquals(1, totals.get("tasksFailed").asLong());
    assertEquals(1, totals.get("tasksKilled").asLong());
    assertEquals(300.0, totals.get("busyMs").asDouble()); // every ended task ran, whatever its outcome
    assertEquals(1, executor(snap, "1").get("tasksFailed").asLong());
    JsonNode q = snap.get("queries").get(Q1);
    assertEquals(1, q.get("tasksFinished").asLong());
    assertEquals(1, q.get("tasksFailed").asLong());
    assertEquals(1, q.get("jobsFailed").asLong());
  }

  @Test
  void maxStageTasksIsTheWidestOfTheLastSubmittedStages() {
    Properties props = Events.microBatch(Q1, "0");
    StageInfo wide = Events.stage(1, 0, 50);
    StageInfo skipped = Events.stage(2, 0, 500); // in the job, never submitted: it does not run
    events.jobStart(1, T0, props, wide, skipped).stageSubmitted(wide, props);
    assertEquals(50, snapshot(T0).get("queries").get(Q1).get("maxStageTasks").asInt());
    for (int s = 0; s < SparkscaleListener.MAX_STAGES_PER_QUERY; s++) {
      StageInfo narrow = Events.stage(100 + s, 0, 4);
      events.jobStart(100 + s, T0, props, narrow).stageSubmitted(narrow, props);
    }
    // The wide stage fell out of the window of the last MAX_STAGES_PER_QUERY stages.
    assertEquals(4, snapshot(T0).get("queries").get(Q1).get("maxStageTasks").asInt());
  }

  @Test
  void eachQueryKeepsItsLatestBatches() {
    events.executorAdded("1", 1, T0);
    int n = SparkscaleListener.MAX_BATCHES_PER_QUERY + 3;
    for (int b = 0; b < n; b++) {
      StageInfo stage = Events.stage(b, 0, 1);
      Properties props = Events.microBatch(Q2, Integer.toString(b));
      events.jobStart(b, T0, props, stage).stageSubmitted(stage, props);
      TaskInfo t = events.taskStart(b, b, 0, "1", T0);
      events.taskSucceeded(b, t, T0 + 10).jobEnd(b, T0 + 10);
    }
    JsonNode batches = snapshot(T0 + 100).get("queries").get(Q2).get("batches");
    assertEquals(SparkscaleListener.MAX_BATCHES_PER_QUERY, batches.size());
    assertFalse(batches.has("0"));
    assertTrue(batches.has(Integer.toString(n - 1)));
    assertEquals(n * 10.0, snapshot(T0 + 100).get("queries").get(Q2).get("busyMs").asDouble());
  }


  @Test
  void aSnapshotSinceAChangeCountCarriesOnlyTheBatchesThatChangedAfterIt() {
    events.executorAdded("1", 1, T0);
    for (int b = 0; b < 3; b++) {
      StageInfo stage = Events.stage(b, 0, 1);
      Properties props = Events.microBatch(Q1, Integer.toString(b));
      events.jobStart(b, T0, props, stage).stageSubmitted(stage, props);
      events.taskSucceeded(b, events.taskStart(b, b, 0, "1", T0 + b), T0 + 10 + b).jobEnd(b, T0 + 10 + b);
    }
    JsonNode all = JSON.valueToTree(listener.snapshot("app-1", T0 + 100, -1));
    assertEquals(Set.of("0", "1", "2"), fieldNames(all.get("queries").get(Q1).get("batches")));
    assertEquals(-1, all.get("batchesSince").asLong());
    assertEquals(SparkscaleListener.MAX_BATCHES_PER_QUERY, all.get("batchesPerQuery").asInt());
    long seen = all.get("changes").asLong();

    // Nothing changed: no batch, the rest of the snapshot as always.
    JsonNode none = JSON.valueToTree(listener.snapshot("app-1", T0 + 200, seen));
    assertEquals(0, none.get("queries").get(Q1).get("batches").size());
    assertEquals(3, none.get("queries").get(Q1).get("tasksFinished").asLong());
    assertEquals(seen, none.get("changes").asLong());
    assertEquals(all.get("listenerId"), none.get("listenerId"));

    // A late task of batch 1 and a new batch 3: those two only, with all they hold.
    StageInfo late = Events.stage(10, 0, 1);
    Properties batch1 = Events.microBatch(Q1, "1");
    events.jobStart(10, T0 + 300, batch1, late).stageSubmitted(late, batch1);
    events.taskSucceeded(10, events.taskStart(10, 10, 0, "1", T0 + 300), T0 + 310);
    StageInfo next = Events.stage(11, 0, 1);
    Properties batch3 = Events.microBatch(Q1, "3");
    events.jobStart(11, T0 + 300, batch3, next).stageSubmitted(next, batch3);
    JsonNode changed = JSON.valueToTree(listener.snapshot("app-1", T0 + 400, seen));
    JsonNode batches = changed.get("queries").get(Q1).get("batches");
    assertEquals(Set.of("1", "3"), fieldNames(batches));
    assertEquals(2, batches.get("1").get("tasks").asLong());
    assertEquals(2, batches.get("1").get("stages").asInt());
    assertEquals(0, batches.get("3").get("tasks").asLong());
    assertTrue(changed.get("changes").asLong() > seen);
    assertEquals(seen, changed.get("batchesSince").asLong());
    // Another listener's counts are its own.
    SparkscaleListener other = new SparkscaleListener(new SparkConf(false));
    assertFalse(all.get("listenerId").equals(JSON.valueToTree(other.snapshot("app-1", T0)).get("listenerId")));
  }

  @Test
  void aCaptureIsACopyThatLaterEventsDoNotChange() {
    // The snapshot's maps are built from the capture after the listener's lock is released: the events handled
    // meanwhile must not show in it, or a snapshot would be a mix of two moments.
    events.executorAdded("1", 1, T0);
    StageInfo stage = Events.stage(1, 0, 2);
    Properties props = Events.microBatch(Q1, "0");
    events.jobStart(1, T0, props, stage).stageSubmitted(stage, props);
    TaskInfo a = events.taskStart(1, 1, 0, "1", T0);
    events.taskSucceeded(1, a, T0 + 100);
    SparkscaleListener.State state = listener.capture(T0 + 200, -1);

    TaskInfo b = events.taskStart(1, 2, 1, "1", T0 + 200);
    events.taskSucceeded(1, b, T0 + 500).stageCompleted(stage, T0 + 500).jobEnd(1, T0 + 500)
        .executorAdded("2", 1, T0 + 600);

    JsonNode then = byId(JSON.valueToTree(SparkscaleListener.view(state, "app-1", 0L)));
    assertEquals(Set.of("1"), fieldNames(then.get("executors")));
    assertEquals(1, executor(then, "1").get("tasksFinished").asLong());
    JsonNode batch = then.get("queries").get(Q1).get("batches").get("0");
    assertEquals(1, batch.get("tasks").asLong());
    assertEquals(T0 + 100, batch.get("lastEndMs").asLong());
    assertEquals(T0 + 200, then.get("timeMs").asLong());
    JsonNode now = snapshot(T0 + 700);
    assertEquals(2, executor(now, "1").get("tasksFinished").asLong());
    assertEquals(2, now.get("queries").get(Q1).get("batches").get("0").get("tasks").asLong());
  }
  // ---------------------------------------------------------------- lost events

  @Test
  void aTaskWhoseEndWasLostAgesOutAfterItsStageCompleted() {
    events.executorAdded("7", 2, T0);
    StageInfo stage = Events.stage(900, 0, 1);
    events.taskStart(900, 9001, 0, "7", T0);
    events.stageCompleted(stage, T0 + 1_000); // the task's end never comes (a full listener queue)

    // Within the grace a straggler may still end; it ran at most until its stage completed.
    JsonNode early = snapshot(T0 + 20_000);
    assertEquals(1, executor(early, "7").get("runningTasks").asInt());
    assertEquals(1_000.0, early.get("totals").get("busyMs").asDouble());
    assertEquals(0, early.get("totals").get("tasksAgedOut").asLong());
    // AGE_OUT_MS after its stage completed its end is taken as lost: the executor can look idle again.
    JsonNode late = snapshot(T0 + 1_000 + SparkscaleListener.AGE_OUT_MS);
    assertEquals(0, executor(late, "7").get("runningTasks").asInt());
    assertEquals(1_000.0, late.get("totals").get("busyMs").asDouble());
    assertEquals(1_000.0, executor(late, "7").get("busyMs").asDouble());
    assertEquals(1, late.get("totals").get("tasksAgedOut").asLong());
    // Its busy time neither grows nor goes back.
    JsonNode later = snapshot(T0 + 90_000);
    assertEquals(1_000.0, later.get("totals").get("busyMs").asDouble());
    assertEquals(1, later.get("totals").get("tasksAgedOut").asLong());
  }

  @Test
  void aTaskWhoseEndWasLostAgesOutHoweverManyStagesCompletedAfterItsOwn() {
    // At 100 queries a second's triggers complete hundreds of stages: what the listener remembers of a completed
    // stage must last until its lost tasks age out, not only for the latest stages.
    events.executorAdded("7", 2, T0);
    StageInfo stage = Events.stage(900, 0, 1);
    events.taskStart(900, 9001, 0, "7", T0);
    events.stageCompleted(stage, T0 + 1_000); // the task's end never comes
    for (int s = 0; s < 5_000; s++) {
      StageInfo other = Events.stage(1_000 + s, 0, 1);
      events.taskSucceeded(1_000 + s, events.taskStart(1_000 + s, 20_000 + s, 0, "7", T0 + 2_000), T0 + 2_010)
          .stageCompleted(other, T0 + 2_010);
    }
    JsonNode late = snapshot(T0 + 1_000 + SparkscaleListener.AGE_OUT_MS);
    assertEquals(0, executor(late, "7").get("runningTasks").asInt());
    assertEquals(1, late.get("totals").get("tasksAgedOut").asLong());
    assertEquals(1_000.0 + 5_000 * 10.0, late.get("totals").get("busyMs").asDouble());
  }

  @Test
  void aTaskWhoseEndAndStageCompletionWereBothLostAgesOutOnceTheStatusStoreNoLongerListsItsStage() {
    // One burst of dropped events took the task's end, its stage's completion and its job's end: it would run for
    // the application's life, its executor never idle again and busy by a core for good.
    Set<Integer> active = new java.util.HashSet<>(Set.of(1));
    listener.listActiveStagesWith(() -> active);
    events.executorAdded("1", 1, T0).executorAdded("2", 1, T0);
    StageInfo stage = Events.stage(1, 0, 1);
    Properties props = Events.microBatch(Q1, "0");
    events.jobStart(1, T0, props, stage).stageSubmitted(stage, props);
    events.taskStart(1, 1, 0, "1", T0);
    assertEquals(1, executor(snapshot(T0 + 40_000), "1").get("runningTasks").asInt()); // a long stage: still active
    active.clear(); // the status store saw the stage complete
    events.taskStart(2, 2, 0, "2", T0 + 40_000); // stage 2 not yet in the status store (its queue lags): too young
    JsonNode snap = snapshot(T0 + 42_000);
    assertTrue(listener.idle("1"));
    assertEquals(1, executor(snap, "2").get("runningTasks").asInt());
    assertEquals(1, snap.get("totals").get("tasksAgedOut").asLong());
    // Counted up to the snapshot that found it gone, as earlier snapshots counted it running: no counter goes down.
    assertEquals(42_000.0, executor(snap, "1").get("busyMs").asDouble());
    assertEquals(42_000.0, snap.get("queries").get(Q1).get("busyMs").asDouble());
    assertEquals(42_000.0, executor(snapshot(T0 + 86_400_000L), "1").get("busyMs").asDouble()); // a day later
  }

  @Test
  void aTaskOnARemovedExecutorStopsCountingAtTheRemovalAndAgesOut() {
    events.executorAdded("1", 1, T0);
    StageInfo stage = Events.stage(1, 0, 1);
    Properties props = Events.microBatch(Q1, "0");
    events.jobStart(1, T0, props, stage).stageSubmitted(stage, props);
    events.taskStart(1, 1, 0, "1", T0);
    events.executorRemoved("1", T0 + 2_000, "worker lost");
    JsonNode snap = snapshot(T0 + 10_000);
    assertEquals(2_000.0, executor(snap, "1").get("busyMs").asDouble());
    assertEquals(2_000.0, snap.get("queries").get(Q1).get("busyMs").asDouble());
    snap = snapshot(T0 + 2_000 + SparkscaleListener.AGE_OUT_MS);
    assertEquals(1, snap.get("totals").get("tasksAgedOut").asLong());
    assertEquals(2_000.0, snap.get("queries").get(Q1).get("busyMs").asDouble());
    assertEquals(0, executor(snap, "1").get("runningTasks").asInt());
  }

  @Test
  void aTaskThatOutlivesItsStageByMoreThanTheAgeOutPeriodIsCountedOnceWhenItsEndComes() {
    // A zombie task of a stage attempt that failed (FetchFailed), or a killed task slow to stop: aged out as lost, then
    // its end comes. Nothing was lost (Python stops deciding for a window on a rise), and it ran once.
    events.executorAdded("1", 1, T0);
    StageInfo stage = Events.stage(1, 0, 1);
    Properties props = Events.microBatch(Q1, "0");
    events.jobStart(1, T0, props, stage).stageSubmitted(stage, props);
    TaskInfo t = events.taskStart(1, 1, 0, "1", T0);
    events.stageCompleted(stage, T0 + 1_000).jobEnd(1, T0 + 1_000);
    assertEquals(1, snapshot(T0 + 40_000).get("totals").get("tasksAgedOut").asLong()); // counted busy for 1 s
    events.taskSucceeded(1, t, T0 + 60_000);
    JsonNode snap = snapshot(T0 + 61_000);
    JsonNode totals = snap.get("totals");
    assertEquals(0, totals.get("tasksAgedOut").asLong());
    assertEquals(1, totals.get("tasksFinished").asLong());
    assertEquals(60_000.0, totals.get("busyMs").asDouble());
    assertEquals(60_000.0, executor(snap, "1").get("busyMs").asDouble());
    assertEquals(0, executor(snap, "1").get("runningTasks").asInt());
    JsonNode q = snap.get("queries").get(Q1);
    assertEquals(60_000.0, q.get("busyMs").asDouble()); // its job ended meanwhile: the task kept its query
    assertEquals(60_000.0, q.get("batches").get("0").get("busyMs").asDouble());
  }

  // ---------------------------------------------------------------- other jobs' tasks

  @Test
  void otherJobsTasksNotYetSucceededCountUntilTheirStageOrJobEnds() {
    events.executorAdded("1", 2, T0);
    StageInfo query = Events.stage(1, 0, 4);
    Properties batch0 = Events.microBatch(Q1, "0");
    events.jobStart(1, T0, batch0, query).stageSubmitted(query, batch0); // a query's stage: not another job's
    StageInfo map = Events.stage(2, 0, 5);
    StageInfo reduce = Events.stage(3, 0, 3);
    events.jobStart(2, T0, null, map, reduce).stageSubmitted(map, null); // a batch job: its first stage runs
    assertEquals(5, snapshot(T0).get("otherTasks").asInt());
    TaskInfo a = events.taskStart(2, 10, 0, "1", T0);
    TaskInfo b = events.taskStart(2, 11, 1, "1", T0);
    TaskInfo copy = events.taskStart(2, 12, 1, "1", T0); // a speculative copy of task 1
    TaskInfo lost = events.taskStart(2, 13, 2, "1", T0);
    assertEquals(5, snapshot(T0 + 1).get("otherTasks").asInt()); // running tasks still need their slots
    events.taskSucceeded(2, a, T0 + 10).taskSucceeded(2, b, T0 + 10).taskSucceeded(2, copy, T0 + 11)
        .taskEnd(2, "ShuffleMapTask", Events.failed(), lost, T0 + 12, Events.metrics(0, 0));
    // Tasks 0 and 1 succeeded (task 1 twice, counted once); task 2 failed and runs again.
    assertEquals(3, snapshot(T0 + 20).get("otherTasks").asInt());
    events.stageCompleted(map, T0 + 30).stageSubmitted(reduce, null);
    assertEquals(3, snapshot(T0 + 40).get("otherTasks").asInt()); // the reduce stage's 3
    events.jobEnd(2, T0 + 50); // a cancelled job's running stages end with it
    assertEquals(0, snapshot(T0 + 60).get("otherTasks").asInt());
  }

  @Test
  void aResubmittedTaskOfAnotherJobIsDemandAgain() {
    // Its map output was lost with its executor: Spark runs it again in the same stage attempt.
    events.executorAdded("1", 1, T0).executorAdded("2", 1, T0);
    StageInfo map = Events.stage(2, 0, 2);
    events.jobStart(2, T0, null, map).stageSubmitted(map, null);
    TaskInfo a = events.taskStart(2, 10, 0, "1", T0);
    TaskInfo b = events.taskStart(2, 11, 1, "2", T0);
    events.taskEnd(2, "ShuffleMapTask", Events.success(), a, T0 + 10, Events.metrics(10, 0))
        .taskEnd(2, "ShuffleMapTask", Events.success(), b, T0 + 10, Events.metrics(10, 0));
    assertEquals(0, snapshot(T0 + 20).get("otherTasks").asInt());
    events.executorRemoved("1", T0 + 30, "node lost")
        .taskEnd(2, "ShuffleMapTask", Events.resubmitted(), a, T0 + 30, null);
    JsonNode snap = snapshot(T0 + 40);
    assertEquals(1, snap.get("otherTasks").asInt());
    assertEquals(2, snap.get("totals").get("tasksFinished").asLong()); // its run is not undone
  }

  @Test
  void otherJobsStagesWhoseEndWasLostAreForgottenOnceTheirJobIsKnownToHaveEnded() {
    StageInfo stage = Events.stage(2, 0, 4);
    events.jobStart(7, T0, null, stage).stageSubmitted(stage, null);
    listener.forgetOtherStages(job -> JobExecutionStatus.RUNNING, T0); // the status store does not know it ended
    assertEquals(4, snapshot(T0).get("otherTasks").asInt());
    listener.forgetOtherStages(job -> job == 7 ? JobExecutionStatus.SUCCEEDED : JobExecutionStatus.RUNNING, T0);
    assertEquals(0, snapshot(T0).get("otherTasks").asInt());
  }

  @Test
  void anOtherJobsStageIsForgottenOnceTheStatusStoreHasNotKnownItsJobForTheAgeOutPeriod() {
    // The status store keeps spark.ui.retainedJobs jobs (seconds of them at 100 jobs/s): a job whose end the listener
    // lost may be gone from it too. Not yet known is a lag of its queue: the job still runs, until too old for that.
    StageInfo stage = Events.stage(2, 0, 4);
    events.jobStart(7, T0, null, stage).stageSubmitted(stage, null, T0);
    listener.forgetOtherStages(job -> null, T0 + 1_000);
    assertEquals(4, snapshot(T0 + 1_000).get("otherTasks").asInt());
    listener.forgetOtherStages(job -> null, T0 + SparkscaleListener.AGE_OUT_MS + 1);
    assertEquals(0, snapshot(T0 + SparkscaleListener.AGE_OUT_MS + 1).get("otherTasks").asInt());
  }

  @Test
  void droppedEventsComeInTheSnapshotAndAFailedReadKeepsTheLastCount() {
    assertEquals(0, snapshot(T0).get("listenerEventsDropped").asLong()); // nothing wired: none known
    long[] counted = {5};
    listener.countDroppedEventsWith(() -> {
      if (counted[0] < 0) {
        throw new IllegalStateException("bus stopped");
      }
      return counted[0];
    });
    assertEquals(5, snapshot(T0).get("listenerEventsDropped").asLong());
    counted[0] = -1;
    assertEquals(5, snapshot(T0 + 1).get("listenerEventsDropped").asLong());
    counted[0] = 9;
    assertEquals(9, snapshot(T0 + 2).get("listenerEventsDropped").asLong());
  }

  // ---------------------------------------------------------------- shuffle output

  @Test
  void executorsHoldingShuffleOutputOfARunningJobArePinnedUntilItEnds() {
    events.executorAdded("1", 1, T0).executorAdded("2", 1, T0).executorAdded("3", 1, T0);
    StageInfo map = Events.stage(1, 0, 2);
    StageInfo reduce = Events.stage(2, 0, 1);
    events.jobStart(4, T0, null, map, reduce).stageSubmitted(map, null);
    TaskInfo m1 = events.taskStart(1, 1, 0, "1", T0);
    TaskInfo m2 = events.taskStart(1, 2, 1, "2", T0);
    events.taskEnd(1, "ShuffleMapTask", Events.success(), m1, T0 + 10, Events.metrics(10, 0));
    events.taskEnd(1, "ShuffleMapTask", Events.failed(), m2, T0 + 10, null); // failed: no output
    TaskInfo m3 = events.taskStart(1, 3, 1, "2", T0 + 20);
    events.taskEnd(1, "ShuffleMapTask", Events.success(), m3, T0 + 30, Events.metrics(10, 0));

    assertEquals(Set.of("1", "2"), listener.shuffleHolders(job -> JobExecutionStatus.RUNNING, T0 + 40));
    JsonNode snap = snapshot(T0 + 40);
    assertEquals(1, executor(snap, "1").get("liveShuffleJobs").asInt());
    assertEquals(0, executor(snap, "3").get("liveShuffleJobs").asInt());

    events.jobEnd(4, T0 + 100);
    assertEquals(Set.of(), listener.shuffleHolders(job -> JobExecutionStatus.RUNNING, T0 + 100));
    assertEquals(0, executor(snapshot(T0 + 200), "1").get("liveShuffleJobs").asInt());
  }

  @Test
  void aShuffleJobWhoseEndWasLostIsForgottenWhenSparkSaysItStopped() {
    events.executorAdded("1", 1, T0);
    StageInfo map = Events.stage(1, 0, 1);
    events.jobStart(8, T0, null, map).stageSubmitted(map, null);
    TaskInfo m = events.taskStart(1, 1, 0, "1", T0);
    events.taskEnd(1, "ShuffleMapTask", Events.success(), m, T0 + 10, Events.metrics(10, 0));
    ArrayList<Integer> asked = new ArrayList<>();
    assertEquals(Set.of(), listener.shuffleHolders(job -> {
      asked.add(job);
      return JobExecutionStatus.SUCCEEDED;
    }, T0 + 20));
    assertEquals(java.util.List.of(8), asked);
    assertEquals(0, executor(snapshot(T0 + 20), "1").get("liveShuffleJobs").asInt());
  }

  @Test
  void aShuffleJobTheStatusStoreDoesNotKnowKeepsItsHoldersUntilTheAgeOutPeriodHasPassed() {
    // The listener's queue can be ahead of the status store's: a job it does not know yet still runs, and its reduce
    // stage is about to read executor 1's output. Still unknown long after, it has ended and been evicted from it.
    events.executorAdded("1", 1, T0).executorAdded("2", 1, T0);
    StageInfo map = Events.stage(1, 0, 1);
    StageInfo reduce = Events.stage(2, 0, 1);
    events.jobStart(5, T0, null, map, reduce).stageSubmitted(map, null);
    TaskInfo m = events.taskStart(1, 1, 0, "1", T0);
    events.taskEnd(1, "ShuffleMapTask", Events.success(), m, T0 + 100, Events.metrics(100, 0));
    assertEquals(Set.of("1"), listener.shuffleHolders(job -> null, T0 + 200));
    assertEquals(Set.of("1"), listener.shuffleHolders(job -> JobExecutionStatus.RUNNING, T0 + 300));
    assertEquals(Set.of("1"), listener.shuffleHolders(job -> null, T0 + 100 + SparkscaleListener.AGE_OUT_MS));
    assertEquals(Set.of(), listener.shuffleHolders(job -> null, T0 + 101 + SparkscaleListener.AGE_OUT_MS));
    assertEquals(0, executor(snapshot(T0 + 40_000), "1").get("liveShuffleJobs").asInt());
  }

  private static Set<String> fieldNames(JsonNode node) {
    Set<String> names = new java.util.TreeSet<>();
    node.fieldNames().forEachRemaining(names::add);
    return names;
  }
}
