package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.junit.jupiter.api.Test;

/** {@link ExecutorTracker} on its own: executors added and removed at given times, no listener. */
class ExecutorTrackerTest {
  static final long T0 = 1_700_000_000_000L;

  private final ExecutorTracker executors = new ExecutorTracker(0);

  private ExecutorTracker.Copy copy(long now) {
    return executors.copy(now, new double[executors.indexBound()], Map.of());
  }

  private static SnapshotWriter.ExecutorState row(ExecutorTracker.Copy copy, String id) {
    return copy.rows().stream().filter(r -> r.id().equals(id)).findFirst().orElseThrow();
  }

  @Test
  void slotTimeIsCoresTimesTheTimeRegisteredARemovedOneOnlyUntilItsRemoval() {
    executors.added("1", "h1", 4, T0);
    executors.added("2", "h2", 2, T0 + 1_000);
    executors.removed("2", T0 + 3_000, "lost");
    executors.removed("2", T0 + 4_000, "a second removal is ignored");
    executors.removed("9", T0 + 4_000, "never added: ignored");
    ExecutorTracker.Copy copy = copy(T0 + 10_000);
    assertEquals(4 * 10_000.0 + 2 * 2_000.0, copy.slotMs());
    assertEquals(T0 + 3_000, row(copy, "2").removedMs());
    assertEquals("lost", row(copy, "2").removedReason());
    assertNull(row(copy, "1").removedMs());
    assertEquals(2, executors.added());
    assertEquals(1, executors.removed());
    assertEquals(4, executors.coresPerExecutor()); // the first executor's, spark.executor.cores being unset
  }

  @Test
  void theEldestRemovalsAreForgottenButTheirSlotTimeStays() {
    int n = ExecutorTracker.MAX_REMOVED_EXECUTORS + 3;
    for (int i = 0; i < n; i++) {
      executors.added("x" + i, "h", 1, T0);
      executors.removed("x" + i, T0 + 1_000, "lost");
    }
    ExecutorTracker.Copy copy = copy(T0 + 5_000);
    assertEquals(ExecutorTracker.MAX_REMOVED_EXECUTORS, copy.rows().size());
    assertNull(executors.get("x0"));
    assertEquals(n * 1_000.0, copy.slotMs());
  }

  @Test
  void anIdRegisteredAgainRetiresItsEarlierLifeAndIsNeverEvictedAsRemoved() {
    executors.added("1", "h", 1, T0);
    executors.removed("1", T0 + 1_000, "lost");
    executors.added("1", "h", 1, T0 + 2_000);
    for (int i = 0; i < ExecutorTracker.MAX_REMOVED_EXECUTORS; i++) {
      executors.added("x" + i, "h", 1, T0 + 2_000);
      executors.removed("x" + i, T0 + 3_000, "lost");
    }
    assertTrue(executors.live("1"));
    assertEquals(1_000.0 + 2_000.0 + ExecutorTracker.MAX_REMOVED_EXECUTORS * 1_000.0, copy(T0 + 4_000).slotMs());
  }

  @Test
  void anExecutorUnlistedForTheAgeOutPeriodIsRemovedThenAndCountedOnce() {
    executors.added("1", "h", 1, T0);
    executors.added("2", "h", 1, T0);
    Set<String> listed = new HashSet<>(Set.of("1"));
    executors.removeUnlisted(listed, T0 + 1_000); // first found unlisted
    executors.removeUnlisted(listed, T0 + 1_000 + SparkscaleListener.AGE_OUT_MS - 1);
    assertTrue(executors.live("2"));
    executors.removeUnlisted(listed, T0 + 1_000 + SparkscaleListener.AGE_OUT_MS);
    assertFalse(executors.live("2"));
    assertEquals(ExecutorTracker.UNLISTED_REASON, executors.get("2").removedReason);
    assertEquals(T0 + 1_000 + SparkscaleListener.AGE_OUT_MS, executors.get("2").removedMs);
    executors.removed("2", T0 + 500, "late after all");
    assertEquals(1, executors.removed());
    assertTrue(executors.live("1"));
  }

  @Test
  void listedAgainBeforeTheAgeOutPeriodStartsTheWaitOver() {
    executors.added("1", "h", 1, T0);
    executors.removeUnlisted(Set.of(), T0);
    executors.removeUnlisted(Set.of("1"), T0 + 20_000); // the backend was only slow
    executors.removeUnlisted(Set.of(), T0 + 25_000);
    executors.removeUnlisted(Set.of(), T0 + 25_000 + SparkscaleListener.AGE_OUT_MS - 1);
    assertTrue(executors.live("1"));
  }

  @Test
  void anExecutorFirstSeenRunningATaskIsTrackedFromThenWithTheUsualCores() {
    executors.added("1", "h", 3, T0);
    ExecutorTracker.Executor e = executors.runningTaskOn("7", "h7", T0 + 2_000);
    assertSame(e, executors.runningTaskOn("7", "h7", T0 + 9_000)); // once
    assertEquals(3, e.cores);
    assertEquals(T0 + 2_000, e.addedMs);
    assertEquals(2, executors.added());
    assertEquals(2, executors.indexBound());
  }

  @Test
  void coresPerExecutorIsTheConfsWhenSetElseTheFirstExecutorsElseOne() {
    assertEquals(1, executors.coresPerExecutor());
    ExecutorTracker conf = new ExecutorTracker(3);
    conf.added("1", "h", 8, T0);
    assertEquals(3, conf.coresPerExecutor());
  }

  @Test
  void liveIdleAndLiveExceptFollowTheRunningTasks() {
    executors.added("1", "h", 1, T0);
    executors.added("2", "h", 1, T0);
    executors.added("3", "h", 1, T0);
    executors.removed("3", T0 + 1, "lost");
    executors.get("1").runningTasks = 1;
    assertFalse(executors.idle("1"));
    assertTrue(executors.idle("2"));
    assertFalse(executors.idle("3")); // gone is not idle
    assertFalse(executors.idle("9"));
    assertEquals(2, executors.liveExcept(Set.of()));
    assertEquals(1, executors.liveExcept(Set.of("2", "3")));
  }

  @Test
  void anExecutorsCountersTellOutcomesApartAndKeepTheLastHeapReading() {
    executors.added("1", "h", 1, T0);
    ExecutorTracker.Executor e = executors.get("1");
    e.taskEnded(100, 5, 80, TaskOutcome.SUCCEEDED);
    e.taskEnded(50, 0, 40, TaskOutcome.FAILED);
    e.taskEnded(20, 0, 10, TaskOutcome.KILLED);
    e.heapUsed(300);
    e.heapUsed(0); // none read: kept
    e.runningTasks = 1;
    e.taskAgedOut(30);
    e.taskAgedOut(30); // never below zero running
    SnapshotWriter.ExecutorState r = executors.copy(T0, new double[] {7.0}, Map.of("1", 2)).rows().get(0);
    assertEquals(List.of(1L, 1L), List.of(r.tasksFinished(), r.tasksFailed()));
    assertEquals(100 + 50 + 20 + 60 + 7.0, r.busyMs()); // with the running tasks' elapsed time
    assertEquals(130.0, r.runMs());
    assertEquals(5.0, r.gcMs());
    assertEquals(300, r.heapUsedBytes());
    assertEquals(0, r.runningTasks());
    assertEquals(2, r.liveShuffleJobs());
  }
}
