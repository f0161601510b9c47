package io.sparkscale.bridge;

import java.util.Properties;

import org.apache.spark.Resubmitted$;
import org.apache.spark.Success$;
import org.apache.spark.TaskEndReason;
import org.apache.spark.TaskKilled;
import org.apache.spark.TaskResultLost$;
import org.apache.spark.executor.ExecutorMetrics;
import org.apache.spark.executor.TaskMetrics;
import org.apache.spark.scheduler.JobFailed;
import org.apache.spark.scheduler.JobSucceeded$;
import org.apache.spark.scheduler.SparkListenerExecutorAdded;
import org.apache.spark.scheduler.SparkListenerExecutorMetricsUpdate;
import org.apache.spark.scheduler.SparkListenerExecutorRemoved;
import org.apache.spark.scheduler.SparkListenerJobEnd;
import org.apache.spark.scheduler.SparkListenerJobStart;
import org.apache.spark.scheduler.SparkListenerStageCompleted;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.SparkListenerTaskStart;
import org.apache.spark.scheduler.StageInfo;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.scheduler.TaskLocality;
import org.apache.spark.scheduler.cluster.ExecutorInfo;

import scala.Option;
import scala.Tuple2;
import scala.collection.immutable.List;
import scala.collection.immutable.List$;

/**
 * Scheduler events as Spark's DAGScheduler and scheduler backend post them, built by hand (as Spark's own
 * ExecutorAllocationManagerSuite does) and delivered straight to a listener: no SparkContext, no queue.
 */
final class Events {
  static final String QUERY_ID = Tag.QUERY_ID_KEY;
  static final String BATCH_ID = Tag.BATCH_ID_KEY;

  private final SparkscaleListener listener;

  Events(SparkscaleListener listener) {
    this.listener = listener;
  }

  // ---------------------------------------------------------------- executors

  Events executorAdded(String id, int cores, long timeMs) {
    scala.collection.immutable.Map<String, String> noLogs = scala.collection.immutable.Map$.MODULE$.empty();
    listener.onExecutorAdded(new SparkListenerExecutorAdded(timeMs, id, new ExecutorInfo("host-" + id, cores, noLogs)));
    return this;
  }

  Events executorRemoved(String id, long timeMs, String reason) {
    listener.onExecutorRemoved(new SparkListenerExecutorRemoved(timeMs, id, reason));
    return this;
  }

  /** A heartbeat with the executor's JVM heap peak for one stage. */
  Events heartbeat(String executorId, long heapBytes) {
    scala.collection.Map<Tuple2<Object, Object>, ExecutorMetrics> peaks = scala.collection.immutable.Map$.MODULE$
        .<Tuple2<Object, Object>, ExecutorMetrics>empty().updated(new Tuple2<>(0, 0), heap(heapBytes));
    listener.onExecutorMetricsUpdate(new SparkListenerExecutorMetricsUpdate(executorId, List$.MODULE$.empty(),
        peaks));
    return this;
  }

  static ExecutorMetrics heap(long bytes) {
    scala.collection.immutable.Map<String, Object> values = scala.collection.immutable.Map$.MODULE$
        .<String, Object>empty().updated("JVMHeapMemory", (Object) bytes);
    return new ExecutorMetrics(values);
  }

  // ---------------------------------------------------------------- jobs and stages

  /** Job properties of a micro-batch of a streaming query (null batchId: a streaming job outside a batch). */
  static Properties microBatch(String queryId, String batchId) {
    Properties props = new Properties();
    props.setProperty(QUERY_ID, queryId);
    if (batchId != null) {
      props.setProperty(BATCH_ID, batchId);
    }
    props.setProperty("spark.job.description", "micro-batch");
    return props;
  }

  static StageInfo stage(int stageId, int attempt, int numTasks) {
    return new StageInfo(stageId, attempt, "stage-" + stageId, numTasks, List$.MODULE$.empty(), List$.MODULE$.empty(),
        "", StageInfo.$lessinit$greater$default$8(), StageInfo.$lessinit$greater$default$9(),
        StageInfo.$lessinit$greater$default$10(), 0, false, 0);
  }

  Events jobStart(int jobId, long timeMs, Properties props, StageInfo... stages) {
    List<StageInfo> seq = List$.MODULE$.empty();
    for (int i = stages.length - 1; i >= 0; i--) {
      seq = seq.$colon$colon(stages[i]);
    }
    listener.onJobStart(new SparkListenerJobStart(jobId, timeMs, seq, props == null ? new Properties() : props));
    return this;
  }

  Events stageSubmitted(StageInfo stage, Properties props) {
    listener.onStageSubmitted(new SparkListenerStageSubmitted(stage, props == null ? new Properties() : props));
    return this;
  }

  /** A stage submitted at {@code timeMs}. */
  Events stageSubmitted(StageInfo stage, Properties props, long timeMs) {
    stage.submissionTime_$eq(Option.apply((Object) timeMs));
    return stageSubmitted(stage, props);
  }

  Events stageCompleted(StageInfo stage, long timeMs) {
    stage.completionTime_$eq(Option.apply((Object) timeMs));
    listener.onStageCompleted(new SparkListenerStageCompleted(stage));
    return this;
  }

  Events jobEnd(int jobId, long timeMs) {
    listener.onJobEnd(new SparkListenerJobEnd(jobId, timeMs, JobSucceeded$.MODULE$));
    return this;
  }

  Events jobFailed(int jobId, long timeMs) {
    listener.onJobEnd(new SparkListenerJobEnd(jobId, timeMs, new JobFailed(new RuntimeException("boom"))));
    return this;
  }

  // ---------------------------------------------------------------- tasks

  static TaskInfo task(long taskId, int index, String executorId, long launchMs) {
    return new TaskInfo(taskId, index, 0, index, launchMs, executorId, "host-" + executorId,
        TaskLocality.PROCESS_LOCAL(), false);
  }

  Events taskStart(int stageId, TaskInfo info) {
    listener.onTaskStart(new SparkListenerTaskStart(stageId, 0, info));
    return this;
  }

  /** A task start: the task id, its index in the stage, where and when it launched. */
  TaskInfo taskStart(int stageId, long taskId, int index, String executorId, long launchMs) {
    TaskInfo info = task(taskId, index, executorId, launchMs);
    taskStart(stageId, info);
    return info;
  }

  Events taskSucceeded(int stageId, TaskInfo info, long finishMs) {
    return taskEnd(stageId, "ResultTask", Success$.MODULE$, info, finishMs, metrics(0, 0));
  }

  Events taskEnd(int stageId, String taskType, TaskEndReason reason, TaskInfo info, long finishMs,
                 TaskMetrics metrics) {
    info.finishTime_$eq(finishMs);
    listener.onTaskEnd(new SparkListenerTaskEnd(stageId, 0, taskType, reason, info, new ExecutorMetrics(), metrics));
    return this;
  }

  static TaskMetrics metrics(long runMs, long gcMs) {
    TaskMetrics m = new TaskMetrics();
    m.setExecutorRunTime(runMs);
    m.setJvmGCTime(gcMs);
    return m;
  }

  static TaskEndReason success() {
    return Success$.MODULE$;
  }

  static TaskEndReason failed() {
    return TaskResultLost$.MODULE$;
  }

  static TaskEndReason killed() {
    return new TaskKilled("stage cancelled", List$.MODULE$.empty(), List$.MODULE$.empty(), List$.MODULE$.empty());
  }

  static TaskEndReason resubmitted() {
    return Resubmitted$.MODULE$;
  }
}
