package io.sparkscale.bridge;

import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.JobExecutionStatus;

/**
 * Shuffle output of running jobs, any job (streaming or not): stage -> job, and job -> executors holding map output of
 * it. Removing such an executor before its job ends loses that output, so the job's reduce tasks fail to fetch it
 * (FetchFailed) and the map stage is re-run; once the job has ended its shuffle output is never read again (a later
 * job that reuses the stage recomputes what a removed executor held instead of failing). Not thread-safe:
 * {@link SparkscaleListener} calls it under its lock.
 */
final class ShuffleHolders {
  /** Executors holding shuffle map output of one job, and when the first of them was recorded. */
  record Holders(long sinceMs, HashSet<String> executors) {
  }

  private final LinkedHashMap<Integer, Integer> stageJobs = BoundedMaps.bounded(BoundedMaps.MAX_RUNNING_STAGES, false);
  private final HashMap<Integer, Holders> byJob = new HashMap<>();

  void jobStarted(int jobId, int[] stageIds) {
    for (int stageId : stageIds) {
      stageJobs.put(stageId, jobId);
    }
  }

  void jobEnded(int jobId) {
    stageJobs.values().removeIf(job -> job == jobId);
    byJob.remove(jobId);
  }

  /** The running job a stage belongs to, -1 when not known. */
  int jobOf(int stageId) {
    return stageJobs.getOrDefault(stageId, -1);
  }

  /** A map task of this stage succeeded on this executor at {@code finishMs}; stages of no running job are ignored. */
  void mapOutput(int stageId, String executorId, long finishMs) {
    Integer job = stageJobs.get(stageId);
    if (job != null) {
      byJob.computeIfAbsent(job, j -> new Holders(finishMs, new HashSet<>())).executors().add(executorId);
    }
  }

  /** The jobs with shuffle output held. */
  int[] jobs() {
    return byJob.keySet().stream().mapToInt(Integer::intValue).toArray();
  }

  /**
   * Forgets the jobs that have ended by {@link JobEnds#jobEnded} ({@code known}: the status store's word on the jobs
   * asked about): a job end lost with dropped events must not pin executors forever.
   */
  void forgetEnded(Map<Integer, JobExecutionStatus> known, long now) {
    byJob.entrySet().removeIf(j -> known.containsKey(j.getKey())
        && JobEnds.jobEnded(known.get(j.getKey()), j.getValue().sinceMs(), now));
  }

  /** The executors holding shuffle output of a running job. */
  HashSet<String> holders() {
    HashSet<String> out = new HashSet<>();
    for (Holders holders : byJob.values()) {
      out.addAll(holders.executors());
    }
    return out;
  }

  /** How many running jobs each executor holds shuffle output of (none: absent), in one pass over the jobs. */
  Map<String, Integer> jobsPerExecutor() {
    HashMap<String, Integer> out = new HashMap<>();
    for (Holders holders : byJob.values()) {
      for (String id : holders.executors()) {
        out.merge(id, 1, Integer::sum);
      }
    }
    return out;
  }

  int trackedStages() {
    return stageJobs.size();
  }
}
