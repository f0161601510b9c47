package io.sparkscale.bridge;

import com.fasterxml.jackson.databind.ObjectMapper;

import org.apache.spark.util.kvstore.KVStore;
import org.apache.spark.util.kvstore.KVStoreIterator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The History Server's Autoscaler tab content: the {@link HistoryRecord}s {@link HistoryListener} kept during the
 * replay, read back as the events they were and fed to a {@link TabDocument}, the builder of the live tab's document.
 * Rebuilt only when the store holds a different number of records (an in-progress application replayed again), so
 * opening the page twice costs one read of the store.
 */
final class HistoryDocument implements AutoscalerTab.Content {
  private static final Logger LOG = LoggerFactory.getLogger(HistoryDocument.class);
  private static final ObjectMapper MAPPER = new ObjectMapper();

  private final KVStore store;
  private long builtCount = -1;
  private String built;

  HistoryDocument(KVStore store) {
    this.store = store;
  }

  @Override
  public synchronized String json() {
    try {
      long count = store.count(HistoryRecord.class);
      if (count != builtCount) {
        built = build(store);
        builtCount = count;
      }
      return built;
    } catch (Exception e) {
      throw new IllegalStateException("cannot read the autoscaler's events from the application store", e);
    }
  }

  @Override
  public boolean live() {
    return false;
  }

  /** The document of the records in the store, in {@code seq} order (the order of the log). */
  static String build(KVStore store) throws Exception {
    TabDocument document = new TabDocument(TabDocument.SOURCE_EVENT_LOG, TabDocument.HISTORY);
    // A closeable iterator: a disk store's iterator holds native resources until closed.
    try (KVStoreIterator<HistoryRecord> it = store.view(HistoryRecord.class).closeableIterator()) {
      while (it.hasNext()) {
        add(document, it.next());
      }
    }
    return document.json();
  }

  static void add(TabDocument document, HistoryRecord r) {
    try {
      switch (r.type()) {
        case HistoryRecord.TICK -> document.add(MAPPER.readValue(r.json(), AutoscalerTick.class));
        case HistoryRecord.SCALING -> document.add(MAPPER.readValue(r.json(), ScalingEvent.class));
        case HistoryRecord.EVENT -> document.add(MAPPER.readValue(r.json(), AutoscalerEvent.class));
        case HistoryRecord.END -> document.ended(MAPPER.readTree(r.json()).path("timestampMs").asLong());
        default -> {
          // A record type of a newer bridge: ignored.
        }
      }
    } catch (Exception e) {
      // One unreadable record must not cost the page.
      LOG.warn("sparkscale: skipped an unreadable autoscaler record {}: {}", r.seq(), e.toString());
    }
  }
}
