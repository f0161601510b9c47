package io.sparkscale.bridge;

import java.util.HashSet;
import java.util.Map;
import java.util.Set;

import org.apache.spark.ExecutorAllocationClient;
import org.apache.spark.JobExecutionStatus;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkJobInfo;
import org.apache.spark.scheduler.SchedulerBackend;

import scala.Option;
import scala.collection.Iterator;

/** What a SparkContext's own bookkeeping says, for the listener to catch up on events it lost (see SparkViews). */
final class SparkContextViews {
  private SparkContextViews() {
  }

  /**
   * Events Spark's listener bus dropped so far (its queues were full), summed over every queue's
   * {@code numDroppedEvents} counter. Snapshots carry it, so Python reads it without a round trip of its own.
   */
  static long droppedListenerEvents(SparkContext c) {
    long dropped = 0L;
    for (Map.Entry<String, com.codahale.metrics.Counter> e
        : c.listenerBus().metrics().metricRegistry().getCounters().entrySet()) {
      if (e.getKey().endsWith(".numDroppedEvents")) {
        dropped += e.getValue().getCount();
      }
    }
    return dropped;
  }

  /**
   * The executors the scheduler backend lists, null without one that lists them (local mode) or once stopped. The
   * backend drops an executor before it posts its removal: it is ahead of the listener. Called outside the listener's
   * lock (the backend's getExecutorIds takes the backend's).
   */
  static Set<String> listedExecutors(SparkContext c) {
    SchedulerBackend backend = c.isStopped() ? null : c.schedulerBackend();
    if (!(backend instanceof ExecutorAllocationClient)) {
      return null;
    }
    // scala.collection.Seq: Scala 2.12 builds return it, 2.13 ones its subtype immutable.Seq.
    scala.collection.Seq<String> ids = ((ExecutorAllocationClient) backend).getExecutorIds();
    HashSet<String> out = new HashSet<>();
    for (Iterator<String> it = ids.iterator(); it.hasNext(); ) {
      out.add(it.next());
    }
    return out;
  }

  /** The stages the status store lists as active, null once stopped. */
  static Set<Integer> activeStages(SparkContext c) {
    if (c.isStopped()) {
      return null;
    }
    HashSet<Integer> out = new HashSet<>();
    for (int id : c.statusTracker().getActiveStageIds()) {
      out.add(id);
    }
    return out;
  }

  /**
   * The status store's word on a job, null when it does not know it: not yet (its queue lags the listener's) or no
   * longer (it keeps spark.ui.retainedJobs). {@link JobEnds#jobEnded} tells which.
   */
  static JobExecutionStatus jobStatus(SparkContext c, int jobId) {
    Option<SparkJobInfo> job = c.statusTracker().getJobInfo(jobId);
    return job.isDefined() ? job.get().status() : null;
  }
}
