package io.sparkscale.bridge;

import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.JobExecutionStatus;

/**
 * The running stage attempts of jobs outside every streaming query (a batch or ML job sharing the application): their
 * tasks not yet succeeded are the demand of other jobs that the autoscaler counts, as Spark's own dynamic allocation
 * counts pending and running tasks. Not thread-safe: {@link SparkscaleListener} calls it under its lock.
 */
final class OtherJobsDemand {
  /** A running stage attempt of another job: its tasks, and the indices of those that succeeded. */
  record OtherStage(int jobId, long sinceMs, int tasks, BitSet succeeded) {
    int left() {
      return Math.max(0, tasks - succeeded.cardinality());
    }
  }

  private final HashMap<Long, OtherStage> stages = new HashMap<>(); // by stage key

  /** @param jobId -1 when the stage's job is not known */
  void stageSubmitted(int stageId, int attempt, int jobId, long submittedMs, int numTasks) {
    stages.put(BoundedMaps.stageKey(stageId, attempt), new OtherStage(jobId, submittedMs, numTasks, new BitSet()));
  }

  void stageCompleted(int stageId, int attempt) {
    stages.remove(BoundedMaps.stageKey(stageId, attempt));
  }

  /** A job ended: a cancelled job's stages end with it. */
  void jobEnded(int jobId) {
    stages.values().removeIf(s -> s.jobId() == jobId);
  }

  /** By index: a speculative copy's success is not a second one. Tasks of other stages are ignored. */
  void taskSucceeded(int stageId, int attempt, int index) {
    OtherStage other = stages.get(BoundedMaps.stageKey(stageId, attempt));
    if (other != null) {
      other.succeeded().set(index);
    }
  }

  /** A task that had succeeded lost its output (with its executor): Spark runs it again, so it is demand again. */
  void taskResubmitted(int stageId, int attempt, int index) {
    OtherStage other = stages.get(BoundedMaps.stageKey(stageId, attempt));
    if (other != null) {
      other.succeeded().clear(index);
    }
  }

  /** The tasks of other jobs not yet succeeded: pending or running, they need slots. */
  int tasksLeft() {
    int n = 0;
    for (OtherStage stage : stages.values()) {
      n += stage.left();
    }
    return n;
  }

  /** The jobs of the stages tracked (-1: not known), each once. */
  int[] jobs() {
    return stages.values().stream().mapToInt(OtherStage::jobId).distinct().toArray();
  }

  /**
   * Forgets the stages whose job has ended by {@link JobEnds#jobEnded} ({@code known}: the status store's word on the
   * jobs asked about): their stage-completed and job-end events were lost, and their tasks would count for ever.
   */
  void forgetEnded(Map<Integer, JobExecutionStatus> known, long now) {
    stages.values().removeIf(s -> known.containsKey(s.jobId()) && JobEnds.jobEnded(known.get(s.jobId()), s.sinceMs(),
        now));
  }
}
