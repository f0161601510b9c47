package io.sparkscale.bridge;

import org.apache.spark.util.kvstore.KVIndex;

/**
 * One autoscaler event of a replayed event log, as the History Server keeps it in the application's store (in memory,
 * or on disk with {@code spark.history.store.path}: then Jackson writes it, which is why it is a plain record of
 * text and numbers). {@link HistoryListener} writes them during the replay; the tab reads them back, in {@code seq}
 * order (the order of the log), when someone opens it.
 *
 * @param seq  position among this application's autoscaler events: the store's key
 * @param type {@link #TICK}, {@link #SCALING}, {@link #EVENT} or {@link #END}
 * @param json the event as the listener received it, serialized by Jackson (its record components)
 */
public record HistoryRecord(long seq, String type, String json) {
  static final String TICK = "tick";
  static final String SCALING = "scaling";
  static final String EVENT = "event";
  static final String END = "end";

  /** The natural index. Declared here rather than on the component, which would annotate the field too (twice). */
  @KVIndex
  @Override
  public long seq() {
    return seq;
  }
}
