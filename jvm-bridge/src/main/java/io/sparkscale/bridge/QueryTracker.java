package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * The streaming queries' accounting: which jobs and stages belong to which query and micro-batch (their tags), and
 * each query's and each recent batch's counters. Not thread-safe: {@link SparkscaleListener} calls it under its lock.
 */
final class QueryTracker {
  static final int MAX_STAGES_PER_QUERY = 20;
  static final int MAX_BATCHES_PER_QUERY = 64;
  static final int MAX_QUERIES = 256;

  /** One micro-batch of a query: what its tasks did (see BatchTasks in snapshot-schema.json). */
  static final class Batch {
    long change; // the change count when it last changed: snapshots can carry only what changed
    double busyMs;
    long tasks;
    final BitSet executors = new BitSet();
    long firstLaunchMs = -1;
    long lastEndMs = -1;
    int stages;
  }

  static final class Query {
    double busyMs;
    long tasksFinished;
    long tasksFailed;
    double runMs;
    long jobsFailed;
    final int[] stageTasks = new int[MAX_STAGES_PER_QUERY]; // ring buffer of numTasks of submitted stages
    int stagesSeen;
    final LinkedHashMap<String, Batch> batches = BoundedMaps.bounded(MAX_BATCHES_PER_QUERY, false);
  }

  private final LinkedHashMap<Integer, Tag> stageTags = BoundedMaps.bounded(BoundedMaps.MAX_RUNNING_STAGES, false);
  private final LinkedHashMap<Integer, Tag> jobTags = BoundedMaps.bounded(BoundedMaps.MAX_RUNNING_JOBS, false);
  // Least recently updated first: the eldest is the one forgotten.
  private final LinkedHashMap<String, Query> queries = BoundedMaps.bounded(MAX_QUERIES, true);
  private long changes; // changes to batches so far (see Batch.change)

  /** A job started with these job-local properties and stages: a streaming query's job tags them. */
  void jobStarted(int jobId, Properties props, int[] stageIds) {
    Tag tag = Tag.of(props, jobId);
    if (tag == null) {
      return;
    }
    for (int stageId : stageIds) {
      stageTags.put(stageId, tag);
    }
    jobTags.put(jobId, tag);
  }

  void jobEnded(int jobId, boolean succeeded) {
    Tag tag = jobTags.remove(jobId);
    if (tag == null) {
      return;
    }
    // Only drop stages still owned by this job: a stage can be shared with a later job.
    stageTags.values().removeIf(t -> t.jobId() == jobId);
    if (!succeeded) {
      query(tag.queryId()).jobsFailed++;
    }
  }

  /**
   * A stage submitted, with its job's properties; false when it belongs to no streaming query. Only stages that really
   * run count toward the useful-parallelism cap (skipped stages are never submitted).
   */
  boolean stageSubmitted(int stageId, Properties props, int numTasks) {
    Tag tag = stageTags.get(stageId);
    if (tag == null) {
      tag = Tag.of(props, -1);
      if (tag == null) {
        return false;
      }
    }
    Query q = query(tag.queryId());
    q.stageTasks[q.stagesSeen % MAX_STAGES_PER_QUERY] = numTasks;
    q.stagesSeen++;
    if (tag.batchId() != null) {
      batch(q, tag.batchId()).stages++;
    }
    return true;
  }

  /** The tag of a running job's stage, null when none (not a streaming query's, or its job has ended). */
  Tag stageTag(int stageId) {
    return stageTags.get(stageId);
  }

  void taskStarted(Tag tag, int executorIndex, long launchMs) {
    if (tag == null || tag.batchId() == null) {
      return;
    }
    Batch b = batch(query(tag.queryId()), tag.batchId());
    b.executors.set(executorIndex);
    if (b.firstLaunchMs < 0 || launchMs < b.firstLaunchMs) {
      b.firstLaunchMs = launchMs;
    }
  }

  /**
   * A task of {@code tag} ended: {@code more}, the busy time not counted for it yet (an aged-out task counted part of
   * it in its query, not in its batch), {@code busy}, all of it; {@code executorIndex} -1 when its executor is not
   * tracked.
   */
  void taskEnded(Tag tag, double more, double busy, double run, TaskOutcome outcome, int executorIndex, long finishMs) {
    Query q = query(tag.queryId());
    q.busyMs += more;
    q.runMs += run;
    if (outcome == TaskOutcome.SUCCEEDED) {
      q.tasksFinished++;
    } else if (outcome == TaskOutcome.FAILED) {
      q.tasksFailed++;
    }
    if (tag.batchId() != null) {
      Batch b = batch(q, tag.batchId());
      b.busyMs += busy;
      b.tasks++;
      if (executorIndex >= 0) {
        b.executors.set(executorIndex);
      }
      b.lastEndMs = Math.max(b.lastEndMs, finishMs);
    }
  }

  /** A task of {@code tag} aged out: its time so far counts for its query (its batch gets it when its end comes). */
  void taskAgedOut(Tag tag, double busyMs) {
    query(tag.queryId()).busyMs += busyMs;
  }

  /** Changes to batches so far: a snapshot since one of them carries the batches changed after it. */
  long changes() {
    return changes;
  }

  int trackedJobs() {
    return jobTags.size();
  }

  int trackedStages() {
    return stageTags.size();
  }

  /**
   * The queries' counters, with their running tasks' elapsed time ({@code inflightByQuery}) and the batches changed
   * after change count {@code batchesSince} (-1: all).
   */
  List<SnapshotWriter.QueryState> copy(long batchesSince, Map<String, double[]> inflightByQuery) {
    List<SnapshotWriter.QueryState> out = new ArrayList<>(queries.size());
    for (Map.Entry<String, Query> entry : queries.entrySet()) {
      Query q = entry.getValue();
      int maxStageTasks = 0;
      for (int i = 0; i < Math.min(q.stagesSeen, MAX_STAGES_PER_QUERY); i++) {
        maxStageTasks = Math.max(maxStageTasks, q.stageTasks[i]);
      }
      List<SnapshotWriter.BatchState> batches = new ArrayList<>(q.batches.size());
      for (Map.Entry<String, Batch> b : q.batches.entrySet()) {
        Batch batch = b.getValue();
        if (batch.change <= batchesSince) {
          continue;
        }
        batches.add(new SnapshotWriter.BatchState(b.getKey(), batch.busyMs, batch.tasks,
            batch.executors.cardinality(), batch.firstLaunchMs, batch.lastEndMs, batch.stages));
      }
      double[] runningMs = inflightByQuery.get(entry.getKey());
      out.add(new SnapshotWriter.QueryState(entry.getKey(), q.busyMs + (runningMs == null ? 0.0 : runningMs[0]),
          q.tasksFinished, q.tasksFailed, q.runMs, q.jobsFailed, maxStageTasks, batches));
    }
    return out;
  }

  private Query query(String queryId) {
    Query q = queries.get(queryId); // access order: marks the query as recently active
    if (q == null) {
      q = new Query();
      queries.put(queryId, q);
    }
    return q;
  }

  /** The batch, marked changed now. */
  private Batch batch(Query q, String batchId) {
    Batch b = q.batches.computeIfAbsent(batchId, id -> new Batch());
    b.change = ++changes;
    return b;
  }
}
