package io.sparkscale.bridge;

import java.util.LinkedHashMap;
import java.util.Map;

/** Maps that forget their eldest entry beyond a size: what the listener keeps must not grow with lost events. */
final class BoundedMaps {
  // Jobs (and their stages) whose end has not come: a few at a time, unless job ends were lost with dropped events;
  // beyond this the eldest are forgotten (they have ended) rather than kept for the application's life.
  static final int MAX_RUNNING_JOBS = 10_000;
  static final int MAX_RUNNING_STAGES = 10_000;

  private BoundedMaps() {
  }

  /** A map that forgets its eldest entry beyond {@code max}: by insertion, or by access when {@code byAccess}. */
  static <K, V> LinkedHashMap<K, V> bounded(int max, boolean byAccess) {
    return new LinkedHashMap<>(16, 0.75f, byAccess) {
      @Override
      protected boolean removeEldestEntry(Map.Entry<K, V> eldest) {
        return size() > max;
      }
    };
  }

  /** One key for a stage attempt. */
  static long stageKey(int stageId, int attempt) {
    return ((long) stageId << 20) | (attempt & 0xFFFFF);
  }
}
