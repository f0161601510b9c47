package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Set;

import org.junit.jupiter.api.Test;

/** {@link RunningTasks} on its own: tasks started and ended at given times, swept at given times. */
class RunningTasksTest {
  static final long T0 = 1_700_000_000_000L;
  static final long AGE_OUT = SparkscaleListener.AGE_OUT_MS;
  static final Tag Q = new Tag("q", "0", 1);

  private final RunningTasks tasks = new RunningTasks();
  private final ExecutorTracker executors = new ExecutorTracker(0);

  RunningTasksTest() {
    executors.added("1", "h", 1, T0);
    executors.added("2", "h", 1, T0);
  }

  @Test
  void aSweepCountsTheElapsedTimePerExecutorAndQuery() {
    tasks.started(1, "1", T0, Q, 1, 0);
    tasks.started(2, "2", T0 + 500, null, 2, 0);
    tasks.started(3, "gone", T0, null, 2, 0); // an executor not tracked: the total only
    RunningTasks.Inflight in = tasks.sweep(T0 + 1_000, null, executors);
    assertEquals(1_000.0 + 500.0 + 1_000.0, in.totalMs());
    assertEquals(1_000.0, in.byExecutorIndex()[executors.get("1").index]);
    assertEquals(500.0, in.byExecutorIndex()[executors.get("2").index]);
    assertEquals(1_000.0, in.byQuery().get("q")[0]);
    assertTrue(in.agedOut().isEmpty());
    assertEquals(3, tasks.size());
  }

  @Test
  void aTaskAgesOutTheAgeOutPeriodAfterItsStageCompletedCountedUntilThen() {
    tasks.started(1, "1", T0, Q, 1, 0);
    tasks.stageCompleted(1, 0, T0 + 1_000);
    RunningTasks.Inflight early = tasks.sweep(T0 + 1_000 + AGE_OUT - 1, null, executors);
    assertEquals(1_000.0, early.totalMs()); // it ran at most until its stage completed
    assertEquals(0, tasks.agedOutCount());
    RunningTasks.Inflight late = tasks.sweep(T0 + 1_000 + AGE_OUT, null, executors);
    assertEquals(0.0, late.totalMs());
    assertEquals(1, late.agedOut().size());
    assertEquals(1_000.0, late.agedOut().get(0).busyMs());
    assertEquals(Q, late.agedOut().get(0).task().tag());
    assertEquals(1, tasks.agedOutCount());
    assertEquals(0, tasks.size());
  }

  @Test
  void anotherAttemptsCompletionDoesNotEndATask() {
    tasks.started(1, "1", T0, null, 1, 1);
    tasks.stageCompleted(1, 0, T0 + 1_000);
    assertEquals(AGE_OUT + 2_000.0, tasks.sweep(T0 + AGE_OUT + 2_000, null, executors).totalMs());
  }

  @Test
  void aTaskOnARemovedExecutorAgesOutTheAgeOutPeriodAfterTheRemoval() {
    tasks.started(1, "1", T0, Q, 1, 0);
    executors.removed("1", T0 + 2_000, "lost");
    assertEquals(2_000.0, tasks.sweep(T0 + 10_000, null, executors).totalMs());
    assertEquals(1, tasks.sweep(T0 + 2_000 + AGE_OUT, null, executors).agedOut().size());
  }

  @Test
  void aTaskWhoseStageTheStatusStoreNoLongerListsAgesOutOnceOlderThanTheAgeOutPeriod() {
    tasks.started(1, "1", T0, Q, 1, 0);
    tasks.started(2, "2", T0 + 40_000, null, 2, 0); // too young: its stage may not be in the store yet
    assertTrue(tasks.sweep(T0 + 40_000, Set.of(1), executors).agedOut().isEmpty()); // listed: a long stage
    RunningTasks.Inflight in = tasks.sweep(T0 + 42_000, Set.of(), executors);
    assertEquals(1, in.agedOut().size());
    assertEquals(42_000.0, in.agedOut().get(0).busyMs()); // up to the sweep that found it gone
    assertEquals(2_000.0, in.totalMs());
  }

  @Test
  void anEndAfterTheAgeOutUndoesItAndTellsWhatWasCounted() {
    tasks.started(1, "1", T0, Q, 1, 0);
    tasks.stageCompleted(1, 0, T0 + 1_000);
    tasks.sweep(T0 + 1_000 + AGE_OUT, null, executors);
    assertNull(tasks.ended(1)); // no longer running
    RunningTasks.AgedOut aged = tasks.endedAfterAgeOut(1);
    assertNotNull(aged);
    assertEquals(1_000.0, aged.busyMs());
    assertEquals(Q, aged.tag());
    assertEquals(0, tasks.agedOutCount());
    assertNull(tasks.endedAfterAgeOut(1)); // once
  }

  @Test
  void onlyTheLatestAgedOutTasksAreRemembered() {
    int n = RunningTasks.MAX_AGED_OUT_TASKS + 1;
    for (int t = 0; t < n; t++) {
      tasks.started(t, "1", T0, null, 1, 0);
    }
    tasks.stageCompleted(1, 0, T0);
    assertEquals(n, tasks.sweep(T0 + AGE_OUT, null, executors).agedOut().size());
    assertNull(tasks.endedAfterAgeOut(0)); // forgotten: its late end counts as a new one
    assertNotNull(tasks.endedAfterAgeOut(n - 1));
    assertEquals(n - 1, tasks.agedOutCount());
  }

  @Test
  void anEndedTaskIsNoLongerRunning() {
    tasks.started(1, "1", T0, Q, 1, 0);
    RunningTasks.RunningTask rt = tasks.ended(1);
    assertEquals("1", rt.executorId());
    assertEquals(T0, rt.launchMs());
    assertNull(tasks.ended(1));
    assertEquals(0.0, tasks.sweep(T0 + 5_000, null, executors).totalMs());
  }
}
