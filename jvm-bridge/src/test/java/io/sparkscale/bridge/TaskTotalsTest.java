package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;

import org.junit.jupiter.api.Test;

/** {@link TaskTotals} on its own. */
class TaskTotalsTest {
  @Test
  void endedTasksCountByOutcomeAndEveryOneRan() {
    TaskTotals totals = new TaskTotals();
    totals.taskEnded(100, 5, 90, TaskOutcome.SUCCEEDED);
    totals.taskEnded(50, 1, 40, TaskOutcome.FAILED);
    totals.taskEnded(20, 0, 10, TaskOutcome.KILLED);
    totals.taskAgedOut(1_000);
    assertEquals(List.of(1L, 1L, 1L), List.of(totals.finished, totals.failed, totals.killed));
    assertEquals(1_170.0, totals.busyMs);
    assertEquals(6.0, totals.gcMs);
    assertEquals(140.0, totals.runMs);
  }

  @Test
  void aKilledTaskIsNoFailure() {
    assertEquals(TaskOutcome.KILLED, TaskOutcome.of(Events.killed()));
    assertEquals(TaskOutcome.FAILED, TaskOutcome.of(Events.failed()));
    assertEquals(TaskOutcome.SUCCEEDED, TaskOutcome.of(Events.success()));
  }
}
