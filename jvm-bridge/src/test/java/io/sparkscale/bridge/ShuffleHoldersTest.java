package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import org.apache.spark.JobExecutionStatus;
import org.junit.jupiter.api.Test;

/** {@link ShuffleHolders} and the job-end rule it shares ({@link JobEnds}), on their own. */
class ShuffleHoldersTest {
  static final long T0 = 1_700_000_000_000L;
  static final long AGE_OUT = SparkscaleListener.AGE_OUT_MS;

  private final ShuffleHolders shuffle = new ShuffleHolders();

  private static Map<Integer, JobExecutionStatus> known(int job, JobExecutionStatus status) {
    Map<Integer, JobExecutionStatus> out = new HashMap<>();
    out.put(job, status);
    return out;
  }

  @Test
  void executorsWithMapOutputOfARunningJobAreHoldersUntilItEnds() {
    shuffle.jobStarted(4, new int[] {1, 2});
    shuffle.jobStarted(5, new int[] {3});
    assertEquals(4, shuffle.jobOf(2));
    assertEquals(-1, shuffle.jobOf(9));
    shuffle.mapOutput(1, "a", T0);
    shuffle.mapOutput(1, "b", T0);
    shuffle.mapOutput(3, "a", T0);
    shuffle.mapOutput(9, "c", T0); // a stage of no running job
    assertEquals(Set.of("a", "b"), shuffle.holders());
    assertEquals(Map.of("a", 2, "b", 1), shuffle.jobsPerExecutor());
    shuffle.jobEnded(4);
    assertEquals(Map.of("a", 1), shuffle.jobsPerExecutor());
    assertArrayEquals(new int[] {5}, shuffle.jobs());
    assertEquals(-1, shuffle.jobOf(1));
    assertEquals(1, shuffle.trackedStages());
  }

  @Test
  void aJobTheStatusStoreSaysEndedIsForgottenOneItDoesNotKnowOnlyAfterTheAgeOutPeriod() {
    shuffle.jobStarted(4, new int[] {1});
    shuffle.mapOutput(1, "a", T0 + 100); // recorded from its first holder
    shuffle.forgetEnded(known(4, null), T0 + 100 + AGE_OUT); // not yet known: its queue may lag ours
    assertEquals(Set.of("a"), shuffle.holders());
    shuffle.forgetEnded(known(4, JobExecutionStatus.RUNNING), T0 + 1_000 * AGE_OUT);
    assertEquals(Set.of("a"), shuffle.holders());
    shuffle.forgetEnded(known(4, null), T0 + 101 + AGE_OUT);
    assertEquals(Set.of(), shuffle.holders());
  }

  @Test
  void theJobEndRuleBelievesAnEndAndALongSilence() {
    assertTrue(JobEnds.jobEnded(JobExecutionStatus.SUCCEEDED, T0, T0));
    assertTrue(JobEnds.jobEnded(JobExecutionStatus.FAILED, T0, T0));
    assertFalse(JobEnds.jobEnded(JobExecutionStatus.RUNNING, T0, T0 + 10 * AGE_OUT));
    assertFalse(JobEnds.jobEnded(JobExecutionStatus.UNKNOWN, T0, T0 + AGE_OUT));
    assertTrue(JobEnds.jobEnded(JobExecutionStatus.UNKNOWN, T0, T0 + AGE_OUT + 1));
    assertFalse(JobEnds.jobEnded(null, T0, T0 + AGE_OUT));
    assertTrue(JobEnds.jobEnded(null, T0, T0 + AGE_OUT + 1));
    Map<Integer, JobExecutionStatus> asked = JobEnds.statuses(new int[] {-1, 3}, job -> JobExecutionStatus.RUNNING);
    assertTrue(asked.containsKey(-1));
    assertEquals(null, asked.get(-1)); // never asked of the store
    assertEquals(JobExecutionStatus.RUNNING, asked.get(3));
  }

  @Test
  void theStagesOfJobsWhoseEndsWereLostAreBounded() {
    for (int j = 0; j < BoundedMaps.MAX_RUNNING_STAGES + 5; j++) {
      shuffle.jobStarted(j, new int[] {j});
    }
    assertEquals(BoundedMaps.MAX_RUNNING_STAGES, shuffle.trackedStages());
    assertEquals(-1, shuffle.jobOf(0));
  }
}
