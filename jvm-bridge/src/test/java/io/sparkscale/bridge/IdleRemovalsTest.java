package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.BooleanSupplier;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@link IdleRemovals} against a fake kill: an executor named by Python is killed at its next idle moment, one the
 * kill finds busy again stays wanted, and naming none cancels. Waits are conditions with a deadline.
 */
class IdleRemovalsTest {
  private final Set<String> busy = ConcurrentHashMap.newKeySet();
  private final CopyOnWriteArrayList<String> asked = new CopyOnWriteArrayList<>();
  private final Set<String> live = ConcurrentHashMap.newKeySet();
  private final IdleRemovals removals = new IdleRemovals(ids -> {
    asked.add(ids[0]);
    return busy.contains(ids[0]) ? new String[0] : ids; // the scheduler skips a busy executor
  }, except -> (int) live.stream().filter(id -> !except.contains(id)).count(), id -> live.contains(id));

  IdleRemovalsTest() {
    live.addAll(Set.of("1", "2", "3", "4", "5", "6"));
  }

  @AfterEach
  void close() {
    removals.close();
  }

  private static void waitFor(BooleanSupplier condition, String what) throws InterruptedException {
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (!condition.getAsBoolean()) {
      assertTrue(System.nanoTime() < deadline, "timed out waiting for " + what);
      Thread.sleep(5);
    }
  }

  @Test
  void aWantedExecutorIsRemovedAtItsNextIdleMomentAndOnlyOnce() throws InterruptedException {
    busy.add("3");
    removals.want(new String[] {"3"}, 1, id -> false);
    removals.executorIdle("2"); // not wanted: never asked for
    busy.remove("3");
    removals.executorIdle("3");
    waitFor(() -> asked.contains("3"), "the kill of executor 3");
    assertArrayEquals(new String[] {"3"}, removals.takeRemoved());
    assertArrayEquals(new String[0], removals.takeRemoved()); // taken once
    removals.executorIdle("3"); // no longer wanted
    removals.executorIdle("2");
    removals.want(new String[] {"4"}, 1, id -> true); // idle already: tried at once
    waitFor(() -> asked.contains("4"), "the kill of executor 4");
    assertEquals(java.util.List.of("3", "4"), asked);
  }

  @Test
  void itForgetsTheExecutorsItKilledOnceSparkNoLongerListsThem() throws InterruptedException {
    removals.want(new String[] {"3"}, 1, id -> true);
    waitFor(() -> asked.contains("3"), "the kill of executor 3");
    waitFor(() -> removals.takeRemoved().length == 1, "executor 3 reported removed");
    assertEquals(1, removals.killedListed()); // still listed: not counted among the live
    live.remove("3"); // Spark announced its removal
    removals.want(new String[] {"4"}, 1, id -> true);
    waitFor(() -> asked.contains("4"), "the kill of executor 4");
    waitFor(() -> removals.takeRemoved().length == 1, "executor 4 reported removed");
    assertEquals(1, removals.killedListed()); // 4 only: 3 forgotten
  }

  @Test
  void anExecutorBusyAgainStaysWantedAndNamingNoneCancels() throws InterruptedException {
    busy.add("5");
    removals.want(new String[] {"5"}, 1, id -> false);
    removals.executorIdle("5"); // a task started on it again before the kill
    waitFor(() -> asked.size() == 1, "the first try");
    assertArrayEquals(new String[0], removals.takeRemoved());
    removals.want(new String[0], 6, id -> false); // a scale-up: cancelled
    busy.remove("5");
    removals.executorIdle("5");
    removals.want(new String[] {"6"}, 1, id -> true);
    waitFor(() -> asked.contains("6"), "the kill of executor 6");
    assertEquals(java.util.List.of("5", "6"), asked); // 5 not asked again
    assertArrayEquals(new String[] {"6"}, removals.takeRemoved());
  }

  @Test
  void noneIsRemovedBelowTheTargetWhenExecutorsWereLostMeanwhile() throws InterruptedException {
    removals.want(new String[] {"6", "5"}, 4, id -> false); // 6 live, 4 wanted
    live.removeAll(Set.of("1", "2")); // two lost: the target is met
    removals.executorIdle("6");
    removals.executorIdle("5");
    removals.want(new String[] {"4"}, 3, id -> true); // a later wish is served again
    waitFor(() -> asked.contains("4"), "the kill of executor 4");
    assertEquals(java.util.List.of("4"), asked); // 6 and 5 stayed
    assertArrayEquals(new String[] {"4"}, removals.takeRemoved());
  }
}
