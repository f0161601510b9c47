package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Properties;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.junit.jupiter.api.Test;

/** The listener's busy time and counters per executor, query and micro-batch, through its snapshot. */
class ListenerBatchAccountingTest extends ListenerFixture {
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
    int jobs = BoundedMaps.MAX_RUNNING_JOBS + 50;
    for (int j = 0; j < jobs; j++) {
      StageInfo stage = Events.stage(j, 0, 1);
      Properties props = Events.microBatch(Q1, Integer.toString(j));
      events.jobStart(j, T0, props, stage).stageSubmitted(stage, props);
    }
    int[] tracked = listener.trackedJobsAndStages();
    assertEquals(BoundedMaps.MAX_RUNNING_JOBS, tracked[0]);
    assertEquals(BoundedMaps.MAX_RUNNING_STAGES, tracked[1]);
    assertEquals(BoundedMaps.MAX_RUNNING_STAGES, tracked[2]);
    int last = jobs - 1;
    TaskInfo t = events.taskStart(last, 1, 0, "1", T0);
    events.taskSucceeded(last, t, T0 + 300).jobEnd(last, T0 + 300);
    JsonNode q = snapshot(T0 + 1_000).get("queries").get(Q1);
    assertEquals(300.0, q.get("batches").get(Integer.toString(last)).get("busyMs").asDouble());
    assertEquals(BoundedMaps.MAX_RUNNING_JOBS - 1, listener.trackedJobsAndStages()[0]);
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
    for (int s = 0; s < QueryTracker.MAX_STAGES_PER_QUERY; s++) {
      StageInfo narrow = Events.stage(100 + s, 0, 4);
      events.jobStart(100 + s, T0, props, narrow).stageSubmitted(narrow, props);
    }
    // The wide stage fell out of the window of the last MAX_STAGES_PER_QUERY stages.
    assertEquals(4, snapshot(T0).get("queries").get(Q1).get("maxStageTasks").asInt());
  }

  @Test
  void eachQueryKeepsItsLatestBatches() {
    events.executorAdded("1", 1, T0);
    int n = QueryTracker.MAX_BATCHES_PER_QUERY + 3;
    for (int b = 0; b < n; b++) {
      StageInfo stage = Events.stage(b, 0, 1);
      Properties props = Events.microBatch(Q2, Integer.toString(b));
      events.jobStart(b, T0, props, stage).stageSubmitted(stage, props);
      TaskInfo t = events.taskStart(b, b, 0, "1", T0);
      events.taskSucceeded(b, t, T0 + 10).jobEnd(b, T0 + 10);
    }
    JsonNode batches = snapshot(T0 + 100).get("queries").get(Q2).get("batches");
    assertEquals(QueryTracker.MAX_BATCHES_PER_QUERY, batches.size());
    assertFalse(batches.has("0"));
    assertTrue(batches.has(Integer.toString(n - 1)));
    assertEquals(n * 10.0, snapshot(T0 + 100).get("queries").get(Q2).get("busyMs").asDouble());
  }
}
