package io.sparkscale.bridge;

import java.util.HashMap;
import java.util.function.IntFunction;

import org.apache.spark.JobExecutionStatus;

/**
 * Whether a job whose end event the listener may have lost has ended, by Spark's status store. One rule for the
 * trackers that ask ({@link ShuffleHolders}, {@link OtherJobsDemand}), so that no job is "running" to one and
 * "ended" to the other.
 */
final class JobEnds {
  private JobEnds() {
  }

  /**
   * Whether a job has ended, by the status store's word on it ({@code known}, null when it does not know the job)
   * and when the listener first recorded it ({@code sinceMs}). The status store answers from its own queue, which
   * can lag the listener's: a job it does not know yet still runs. But it also forgets ended jobs
   * (spark.ui.retainedJobs: seconds of them at a hundred jobs a second), and job ends can be dropped: a job it does
   * not know {@link SparkscaleListener#AGE_OUT_MS} after the listener recorded it has ended.
   */
  static boolean jobEnded(JobExecutionStatus known, long sinceMs, long now) {
    if (known == JobExecutionStatus.SUCCEEDED || known == JobExecutionStatus.FAILED) {
      return true;
    }
    if (known == JobExecutionStatus.RUNNING) {
      return false;
    }
    return now - sinceMs > SparkscaleListener.AGE_OUT_MS; // not known (or UNKNOWN)
  }

  /** The status store's word on each of these jobs (null: not known; a job id below 0 is never known). */
  static HashMap<Integer, JobExecutionStatus> statuses(int[] jobs, IntFunction<JobExecutionStatus> status) {
    HashMap<Integer, JobExecutionStatus> known = new HashMap<>();
    for (int job : jobs) {
      known.put(job, job < 0 ? null : status.apply(job));
    }
    return known;
  }
}
