package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.junit.jupiter.api.Test;

/** {@link QueryTracker} on its own: jobs, stages and tasks of queries given as tags and times, no listener. */
class QueryTrackerTest {
  static final long T0 = 1_700_000_000_000L;

  private final QueryTracker queries = new QueryTracker();

  private SnapshotWriter.QueryState query(String id, long batchesSince) {
    return queries.copy(batchesSince, Map.of()).stream().filter(q -> q.id().equals(id)).findFirst().orElseThrow();
  }

  private static SnapshotWriter.BatchState batch(SnapshotWriter.QueryState q, String id) {
    return q.batches().stream().filter(b -> b.id().equals(id)).findFirst().orElseThrow();
  }

  @Test
  void aStreamingJobTagsItsStagesAndOtherJobsTagNone() {
    queries.jobStarted(1, Events.microBatch("q", "4"), new int[] {10, 11});
    queries.jobStarted(2, new Properties(), new int[] {20});
    queries.jobStarted(3, null, new int[] {30});
    assertEquals(new Tag("q", "4", 1), queries.stageTag(11));
    assertNull(queries.stageTag(20));
    assertFalse(queries.stageSubmitted(20, new Properties(), 5)); // another job's: not counted here
    assertTrue(queries.stageSubmitted(10, null, 5)); // tagged by its job
    assertTrue(queries.stageSubmitted(99, Events.microBatch("q", "4"), 3)); // by its own properties
    assertEquals(1, queries.trackedJobs());
    assertEquals(2, queries.trackedStages());
  }

  @Test
  void aJobsEndDropsTheStagesItStillOwnsAndAFailureCounts() {
    queries.jobStarted(1, Events.microBatch("q", "0"), new int[] {10, 11});
    queries.jobStarted(2, Events.microBatch("q", "1"), new int[] {11}); // stage 11 shared with a later job
    queries.jobEnded(1, false);
    assertNull(queries.stageTag(10));
    assertEquals(2, queries.stageTag(11).jobId());
    queries.jobEnded(7, false); // not a query's job
    assertEquals(1, query("q", -1).jobsFailed());
  }

  @Test
  void maxStageTasksIsTheWidestOfTheLastSubmittedStages() {
    Properties props = Events.microBatch("q", null);
    queries.stageSubmitted(1, props, 50);
    assertEquals(50, query("q", -1).maxStageTasks());
    for (int s = 0; s < QueryTracker.MAX_STAGES_PER_QUERY; s++) {
      queries.stageSubmitted(100 + s, props, 4);
    }
    assertEquals(4, query("q", -1).maxStageTasks());
  }

  @Test
  void aBatchTellsItsTasksExecutorsStagesAndSpan() {
    Tag tag = new Tag("q", "4", 1);
    queries.stageSubmitted(1, Events.microBatch("q", "4"), 2);
    queries.taskStarted(tag, 0, T0 + 1_050);
    queries.taskStarted(tag, 1, T0 + 1_000);
    queries.taskStarted(null, 2, T0); // no query's: ignored
    SnapshotWriter.BatchState started = batch(query("q", -1), "4");
    assertEquals(T0 + 1_000, started.firstLaunchMs());
    assertEquals(-1, started.lastEndMs());
    assertEquals(2, started.executors());
    queries.taskEnded(tag, 300, 300, 250, TaskOutcome.SUCCEEDED, 0, T0 + 1_350);
    queries.taskEnded(tag, 100, 400, 0, TaskOutcome.FAILED, 2, T0 + 1_400); // aged out before: 300 counted then
    queries.taskEnded(tag, 50, 50, 0, TaskOutcome.KILLED, -1, T0 + 1_100); // on an executor no longer tracked
    SnapshotWriter.QueryState q = query("q", -1);
    SnapshotWriter.BatchState b = batch(q, "4");
    assertEquals(300.0 + 400.0 + 50.0, b.busyMs()); // all of each task's time
    assertEquals(3, b.tasks());
    assertEquals(3, b.executors());
    assertEquals(T0 + 1_400, b.lastEndMs());
    assertEquals(1, b.stages());
    assertEquals(300.0 + 100.0 + 50.0, q.busyMs()); // what was not counted yet
    assertEquals(250.0, q.runMs());
    assertEquals(List.of(1L, 1L), List.of(q.tasksFinished(), q.tasksFailed()));
  }

  @Test
  void anAgedOutTaskCountsForItsQueryNotItsBatchAndTheRunningTimeIsAdded() {
    queries.taskAgedOut(new Tag("q", "0", 1), 1_000);
    SnapshotWriter.QueryState q = queries.copy(-1, Map.of("q", new double[] {250.0})).get(0);
    assertEquals(1_250.0, q.busyMs());
    assertTrue(q.batches().isEmpty());
  }

  @Test
  void aCopySinceAChangeCountHasOnlyTheBatchesChangedAfterIt() {
    Tag b0 = new Tag("q", "0", 1);
    Tag b1 = new Tag("q", "1", 2);
    queries.taskStarted(b0, 0, T0);
    queries.taskStarted(b1, 0, T0);
    long seen = queries.changes();
    assertTrue(query("q", seen).batches().isEmpty());
    queries.taskEnded(b0, 10, 10, 0, TaskOutcome.SUCCEEDED, 0, T0 + 10);
    assertTrue(queries.changes() > seen);
    assertEquals(List.of("0"), query("q", seen).batches().stream().map(SnapshotWriter.BatchState::id).toList());
    assertEquals(2, query("q", -1).batches().size());
  }

  @Test
  void eachQueryKeepsItsLatestBatches() {
    int n = QueryTracker.MAX_BATCHES_PER_QUERY + 3;
    for (int b = 0; b < n; b++) {
      queries.taskEnded(new Tag("q", Integer.toString(b), b), 10, 10, 0, TaskOutcome.SUCCEEDED, 0, T0);
    }
    SnapshotWriter.QueryState q = query("q", -1);
    assertEquals(QueryTracker.MAX_BATCHES_PER_QUERY, q.batches().size());
    assertEquals("3", q.batches().get(0).id());
    assertEquals(n * 10.0, q.busyMs());
  }

  @Test
  void theQueryUpdatedLeastRecentlyIsForgottenBeyondTheBound() {
    for (int i = 0; i <= QueryTracker.MAX_QUERIES; i++) {
      queries.taskAgedOut(new Tag("q" + i, null, i), 1);
      queries.taskAgedOut(new Tag("q0", null, 0), 1); // q0 stays the most recent
    }
    List<String> ids = queries.copy(-1, Map.of()).stream().map(SnapshotWriter.QueryState::id).toList();
    assertEquals(QueryTracker.MAX_QUERIES, ids.size());
    assertTrue(ids.contains("q0"));
    assertFalse(ids.contains("q1"));
  }

  @Test
  void theTagsOfJobsWhoseEndsWereLostAreBounded() {
    for (int j = 0; j < BoundedMaps.MAX_RUNNING_JOBS + 5; j++) {
      queries.jobStarted(j, Events.microBatch("q", Integer.toString(j)), new int[] {j});
    }
    assertEquals(BoundedMaps.MAX_RUNNING_JOBS, queries.trackedJobs());
    assertEquals(BoundedMaps.MAX_RUNNING_STAGES, queries.trackedStages());
  }
}
