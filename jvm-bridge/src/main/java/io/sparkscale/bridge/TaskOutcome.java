package io.sparkscale.bridge;

import org.apache.spark.Success$;
import org.apache.spark.TaskEndReason;
import org.apache.spark.TaskKilled;

/** How a task ended, as the counters tell them apart. */
enum TaskOutcome {
  SUCCEEDED,
  // Killed on purpose (a stopped query, a cancelled job, a speculative copy): not a failure, or checkers would roll
  // back healthy scalings.
  KILLED,
  FAILED;

  static TaskOutcome of(TaskEndReason reason) {
    if (reason == Success$.MODULE$) {
      return SUCCEEDED;
    }
    return reason instanceof TaskKilled ? KILLED : FAILED;
  }
}
