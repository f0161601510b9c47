package io.sparkscale.bridge;

/**
 * The tasks' totals over the application: they include tasks on executors no longer tracked (evicted removals), so
 * they are kept apart from the executors' own counters. Not thread-safe: {@link SparkscaleListener} calls it under
 * its lock.
 */
final class TaskTotals {
  double busyMs; // ended and aged-out tasks; running ones are added at snapshot time
  long finished;
  long failed;
  long killed;
  double gcMs;
  double runMs;

  /** {@code busy}: the busy time not counted for the task yet (an aged-out task counted part of it). */
  void taskEnded(double busy, double gc, double run, TaskOutcome outcome) {
    busyMs += busy;
    gcMs += gc;
    runMs += run;
    switch (outcome) {
      case SUCCEEDED -> finished++;
      case KILLED -> killed++;
      case FAILED -> failed++;
    }
  }

  /** A task aged out as lost: its time up to its last possible end counts, so that busy time never goes down. */
  void taskAgedOut(double busy) {
    busyMs += busy;
  }
}
