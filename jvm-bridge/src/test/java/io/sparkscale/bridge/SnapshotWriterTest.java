package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * {@link SnapshotWriter} on a hand-made capture: the JSON Python parses, to the byte (field order, nulls, number
 * forms). SnapshotContractTest checks the fields against snapshot-schema.json.
 */
class SnapshotWriterTest {
  static final long T0 = 1_700_000_000_000L;

  @Test
  void theSnapshotIsWrittenFieldByFieldInItsDeclaredOrder() {
    Map<String, Object> totals = new LinkedHashMap<>();
    totals.put("slotMs", 1.0);
    totals.put("tasksFinished", 3L);
    SnapshotWriter.State state = new SnapshotWriter.State(T0, 2, 1024L,
        List.of(new SnapshotWriter.ExecutorState("1", "h", 2, T0 - 10, null, null, 1, 0, 5.0, 3, 0, 1.0, 4.0, -1),
            new SnapshotWriter.ExecutorState("2", "h", 2, T0 - 10, T0 - 5, "lost", 0, 1, 0.5, 0, 1, 0.0, 0.0, 77)),
        totals,
        List.of(new SnapshotWriter.QueryState("q", 5.0, 3, 0, 4.0, 0, 2,
            List.of(new SnapshotWriter.BatchState("0", 5.0, 3, 1, -1, T0, 1)))),
        4, "id", 7, -1);
    String expected = "{\"timeMs\":1700000000000,\"appId\":\"app\",\"coresPerExecutor\":2,"
        + "\"executors\":[[\"1\",\"h\",2,1699999999990,null,null,1,0,5.0,3,0,1.0,4.0,-1,1024],"
        + "[\"2\",\"h\",2,1699999999990,1699999999995,\"lost\",0,1,0.5,0,1,0.0,0.0,77,1024]],"
        + "\"totals\":{\"slotMs\":1.0,\"tasksFinished\":3},"
        + "\"queries\":{\"q\":{\"busyMs\":5.0,\"tasksFinished\":3,\"tasksFailed\":0,\"runMs\":4.0,\"jobsFailed\":0,"
        + "\"maxStageTasks\":2,\"batches\":{\"0\":{\"busyMs\":5.0,\"tasks\":3,\"executors\":1,\"firstLaunchMs\":null,"
        + "\"lastEndMs\":1700000000000,\"stages\":1}}}},"
        + "\"otherTasks\":4,\"listenerEventsDropped\":9,\"listenerId\":\"id\",\"changes\":7,\"batchesSince\":-1,"
        + "\"batchesPerQuery\":" + QueryTracker.MAX_BATCHES_PER_QUERY + "}";
    assertEquals(expected, SparkscaleBridge.toJson(SnapshotWriter.write(state, "app", 9L)));
  }
}
