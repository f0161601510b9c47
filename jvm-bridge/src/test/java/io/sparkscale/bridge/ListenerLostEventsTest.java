package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Properties;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.JobExecutionStatus;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.junit.jupiter.api.Test;

/**
 * The listener after lost events (Spark drops them when a listener queue is full), other jobs' demand and shuffle
 * output, through its snapshot.
 */
class ListenerLostEventsTest extends ListenerFixture {
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
}
