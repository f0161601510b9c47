package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Properties;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.SparkConf;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.junit.jupiter.api.Test;

/**
 * The listener's executors, its snapshots as copies, and what it reads from Spark beside the events: fed synthetic
 * scheduler events and read through its snapshot as Python reads it. Batch accounting: ListenerBatchAccountingTest;
 * lost events, other jobs and shuffle output: ListenerLostEventsTest.
 */
class SparkscaleListenerTest extends ListenerFixture {
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
    int n = ExecutorTracker.MAX_REMOVED_EXECUTORS + 5;
    for (int i = 0; i < n; i++) {
      events.executorAdded(Integer.toString(i), 1, T0).executorRemoved(Integer.toString(i), T0 + 1_000, "lost");
    }
    JsonNode snap = snapshot(T0 + 2_000);
    assertEquals(ExecutorTracker.MAX_REMOVED_EXECUTORS, snap.get("executors").size());
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
    assertEquals(ExecutorTracker.UNLISTED_REASON, gone.get("removedReason").asText());
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
    for (int i = 0; i < ExecutorTracker.MAX_REMOVED_EXECUTORS; i++) {
      events.executorAdded("x" + i, 1, T0).executorRemoved("x" + i, T0 + 1_000, "node lost");
    }
    events.taskEnd(1, "ResultTask", Events.failed(), t, T0 + 1_100, Events.metrics(0, 0)); // ExecutorLostFailure
    assertEquals(0, listener.liveExecutorsExcept(Set.of()));
    JsonNode snap = snapshot(T0 + 2_000);
    assertFalse(snap.get("executors").has("1"));
    assertEquals(1, snap.get("totals").get("tasksFailed").asLong()); // the task still counts
    assertEquals(1 + ExecutorTracker.MAX_REMOVED_EXECUTORS, snap.get("totals").get("executorsAdded").asLong());
  }

  @Test
  void anExecutorIdRegisteredAgainAfterItsRemovalStaysLiveThroughLaterRemovals() {
    events.executorAdded("1", 1, T0).executorRemoved("1", T0 + 1_000, "lost").executorAdded("1", 1, T0 + 2_000);
    for (int i = 0; i < ExecutorTracker.MAX_REMOVED_EXECUTORS; i++) {
      events.executorAdded("x" + i, 1, T0 + 3_000).executorRemoved("x" + i, T0 + 4_000, "lost");
    }
    assertTrue(listener.live("1"));
    JsonNode snap = snapshot(T0 + 5_000);
    assertTrue(executor(snap, "1").get("removedMs").isNull());
    // Both of its lives, and the others'.
    assertEquals(1_000.0 + 3_000.0 + ExecutorTracker.MAX_REMOVED_EXECUTORS * 1_000.0,
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

  // ---------------------------------------------------------------- snapshots

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
    assertEquals(QueryTracker.MAX_BATCHES_PER_QUERY, all.get("batchesPerQuery").asInt());
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
    SnapshotWriter.State state = listener.capture(T0 + 200, -1);

    TaskInfo b = events.taskStart(1, 2, 1, "1", T0 + 200);
    events.taskSucceeded(1, b, T0 + 500).stageCompleted(stage, T0 + 500).jobEnd(1, T0 + 500)
        .executorAdded("2", 1, T0 + 600);

    JsonNode then = byId(JSON.valueToTree(SnapshotWriter.write(state, "app-1", 0L)));
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

  // ---------------------------------------------------------------- Spark's counters

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

  // ---------------------------------------------------------------- the clock

  @Test
  void eventsWithoutATimeAndSnapshotsWithoutOneTakeTheInjectedClocks() {
    long[] now = {T0 + 5_000};
    SparkscaleListener l = new SparkscaleListener(new SparkConf(false), () -> now[0]);
    Events ev = new Events(l);
    ev.executorAdded("1", 1, T0);
    StageInfo stage = Events.stage(1, 0, 1);
    Properties props = Events.microBatch(Q1, "0");
    ev.jobStart(1, T0, props, stage).stageSubmitted(stage, props);
    TaskInfo t = ev.taskStart(1, 1, 0, "1", T0);
    ev.taskEnd(1, "ResultTask", Events.success(), t, 0, Events.metrics(0, 0)); // no finish time: ended now
    JsonNode snap = byId(JSON.valueToTree(l.snapshot("app")));
    assertEquals(T0 + 5_000, snap.get("timeMs").asLong());
    assertEquals(5_000.0, snap.get("totals").get("busyMs").asDouble());
    assertEquals(T0 + 5_000, snap.get("queries").get(Q1).get("batches").get("0").get("lastEndMs").asLong());

    StageInfo lost = Events.stage(2, 0, 1);
    ev.taskStart(2, 2, 0, "1", T0 + 5_000);
    now[0] = T0 + 6_000;
    l.onStageCompleted(new org.apache.spark.scheduler.SparkListenerStageCompleted(lost)); // no completion time
    StageInfo other = Events.stage(3, 0, 4);
    ev.stageSubmitted(other, null); // another job's, no submission time: recorded now
    now[0] = T0 + 6_000 + SparkscaleListener.AGE_OUT_MS;
    l.forgetOtherStages(job -> null, now[0]);
    snap = byId(JSON.valueToTree(l.snapshot("app")));
    assertEquals(1, snap.get("totals").get("tasksAgedOut").asLong()); // AGE_OUT_MS after its stage completed
    assertEquals(5_000.0 + 1_000.0, snap.get("totals").get("busyMs").asDouble());
    assertEquals(4, snap.get("otherTasks").asInt()); // not AGE_OUT_MS past its submission yet
    l.forgetOtherStages(job -> null, now[0] + 1);
    assertEquals(0, JSON.valueToTree(l.snapshot("app")).get("otherTasks").asInt());
  }
}
