package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

import org.apache.spark.JobExecutionStatus;
import org.junit.jupiter.api.Test;

/** {@link OtherJobsDemand} on its own: other jobs' stages and tasks at given times, the status store's word given. */
class OtherJobsDemandTest {
  static final long T0 = 1_700_000_000_000L;

  private final OtherJobsDemand demand = new OtherJobsDemand();

  private static Map<Integer, JobExecutionStatus> known(int job, JobExecutionStatus status) {
    Map<Integer, JobExecutionStatus> out = new HashMap<>();
    out.put(job, status);
    return out;
  }

  @Test
  void tasksNotYetSucceededAreDemandUntilTheirStageCompletes() {
    demand.stageSubmitted(2, 0, 7, T0, 5);
    demand.stageSubmitted(3, 0, 7, T0, 3);
    assertEquals(8, demand.tasksLeft());
    demand.taskSucceeded(2, 0, 0);
    demand.taskSucceeded(2, 0, 1);
    demand.taskSucceeded(2, 0, 1); // a speculative copy's success is not a second one
    demand.taskSucceeded(2, 1, 2); // another attempt's: not this stage's
    demand.taskSucceeded(9, 0, 0); // a stage not tracked
    assertEquals(3 + 3, demand.tasksLeft());
    demand.stageCompleted(2, 0);
    assertEquals(3, demand.tasksLeft());
  }

  @Test
  void aResubmittedTaskIsDemandAgain() {
    demand.stageSubmitted(2, 0, 7, T0, 2);
    demand.taskSucceeded(2, 0, 0);
    demand.taskSucceeded(2, 0, 1);
    assertEquals(0, demand.tasksLeft());
    demand.taskResubmitted(2, 0, 0);
    assertEquals(1, demand.tasksLeft());
  }

  @Test
  void aJobsEndEndsItsStages() {
    demand.stageSubmitted(2, 0, 7, T0, 4);
    demand.stageSubmitted(3, 0, 8, T0, 1);
    demand.jobEnded(7);
    assertEquals(1, demand.tasksLeft());
  }

  @Test
  void theJobsAskedAboutAreEachOnceUnknownOnesIncluded() {
    demand.stageSubmitted(2, 0, 7, T0, 1);
    demand.stageSubmitted(3, 0, 7, T0, 1);
    demand.stageSubmitted(4, 0, -1, T0, 1);
    int[] jobs = demand.jobs();
    Arrays.sort(jobs);
    assertArrayEquals(new int[] {-1, 7}, jobs);
  }

  @Test
  void stagesOfAJobTheStatusStoreSaysEndedAreForgotten() {
    demand.stageSubmitted(2, 0, 7, T0, 4);
    demand.forgetEnded(known(7, JobExecutionStatus.RUNNING), T0 + 100 * SparkscaleListener.AGE_OUT_MS);
    assertEquals(4, demand.tasksLeft());
    demand.forgetEnded(Map.of(), T0 + 100 * SparkscaleListener.AGE_OUT_MS); // not asked about: kept
    assertEquals(4, demand.tasksLeft());
    demand.forgetEnded(known(7, JobExecutionStatus.FAILED), T0);
    assertEquals(0, demand.tasksLeft());
  }

  @Test
  void aStageOfAJobTheStatusStoreDoesNotKnowIsForgottenAfterTheAgeOutPeriod() {
    demand.stageSubmitted(2, 0, -1, T0, 4); // its job not known either
    demand.forgetEnded(JobEnds.statuses(demand.jobs(), job -> JobExecutionStatus.RUNNING),
        T0 + SparkscaleListener.AGE_OUT_MS); // never asked: a job id below 0 is never known
    assertEquals(4, demand.tasksLeft());
    demand.forgetEnded(known(-1, null), T0 + SparkscaleListener.AGE_OUT_MS + 1);
    assertEquals(0, demand.tasksLeft());
  }
}
