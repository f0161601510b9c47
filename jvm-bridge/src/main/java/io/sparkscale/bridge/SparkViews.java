package io.sparkscale.bridge;

import java.util.Map;
import java.util.Set;
import java.util.function.LongSupplier;
import java.util.function.Supplier;

/**
 * What a snapshot reads from Spark besides the listener's counters, wired by the plugin at install (nothing by
 * default). Read outside the listener's lock: the listener's thread takes it for every event. A failed read (a context
 * being stopped) never fails the poll.
 */
final class SparkViews {
  // Events Spark's listener bus dropped (its queues' counters); 0 until wired.
  volatile LongSupplier droppedEvents = () -> 0L;
  volatile Supplier<Map<String, Object>> sourceOffsets = Map::of;
  // Spark's own views (null: unknown): the executors the scheduler backend lists and the stages the status store
  // lists as active. They catch what a burst of dropped events left behind (see SparkscaleListener#capture).
  volatile Supplier<Set<String>> listedExecutors = () -> null;
  volatile Supplier<Set<Integer>> activeStages = () -> null;
  private volatile long droppedSeen; // the last count read: it stands when a read fails

  /** The executors the scheduler backend lists now, null when unknown or the read fails: nothing is concluded then. */
  Set<String> listedExecutors() {
    return readOrNull(listedExecutors);
  }

  /** The stages the status store lists as active now, null when unknown or the read fails. */
  Set<Integer> activeStages() {
    return readOrNull(activeStages);
  }

  private static <T> T readOrNull(Supplier<T> view) {
    try {
      return view.get();
    } catch (RuntimeException e) {
      return null;
    }
  }

  /** The latest offsets read so far, by query id; a failed read gives none. */
  Map<String, Object> sourceOffsets() {
    try {
      return sourceOffsets.get();
    } catch (RuntimeException e) {
      return Map.of();
    }
  }

  /** The events dropped so far; a failed read (a bus being stopped) keeps the last count. */
  long droppedSoFar() {
    try {
      droppedSeen = Math.max(droppedSeen, droppedEvents.getAsLong());
    } catch (RuntimeException e) {
      // The count is cumulative: the last one read is still a lower bound.
    }
    return droppedSeen;
  }
}
