package io.sparkscale.bridge;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.function.Predicate;
import java.util.function.ToIntFunction;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Executors to remove the moment their running tasks end.
 *
 * <p>Why: a scale-down removes only idle executors (killing a busy one fails its tasks), and Python looks once per
 * control tick. A micro-batch job keeps every executor busy for part of each trigger interval, and a tick that falls
 * into that part keeps falling into it for as long as the tick's period and the trigger's stay in step: executors
 * beyond the target then stayed for tens of seconds (up to 74 s on a 2 s trigger, ticking every 2 s).
 *
 * <p>How: Python names the busy executors it wants gone ({@link #want}); the listener reports each executor whose
 * last running task just ended ({@link #executorIdle}, on the listener's thread: a set lookup and a queue offer); a
 * daemon thread kills it there and then, through the same call as any idle removal (the scheduler skips an executor
 * that has started a task since, and one holding shuffle output of a running job is skipped too: it stays wanted
 * and is tried again at its next idle moment). Python collects the ones killed ({@link #takeRemoved}). Naming none
 * cancels (a scale-up, or the target reached). No executor is removed while that would leave fewer live ones than
 * the target Python gave with them: one lost meanwhile must not make the cluster manager start another.
 */
final class IdleRemovals implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(IdleRemovals.class);

  private final Set<String> wanted = ConcurrentHashMap.newKeySet();
  private final LinkedBlockingQueue<String> idle = new LinkedBlockingQueue<>();
  private final ConcurrentLinkedQueue<String> removed = new ConcurrentLinkedQueue<>();
  private final Set<String> killed = ConcurrentHashMap.newKeySet(); // by this, while Spark still lists them
  // Kills these executors unless busy; returns those killed (never throws: failures give none).
  private final Function<String[], String[]> kill;
  // The live executors, less those given (killed, not yet seen removed).
  private final ToIntFunction<Set<String>> liveExcept;
  // Whether Spark still lists this executor as live.
  private final Predicate<String> listed;
  private volatile int keep = Integer.MAX_VALUE;
  private final Thread thread;
  private volatile boolean closed;

  IdleRemovals(Function<String[], String[]> kill, ToIntFunction<Set<String>> liveExcept, Predicate<String> listed) {
    this.kill = kill;
    this.liveExcept = liveExcept;
    this.listed = listed;
    this.thread = new Thread(this::run, "sparkscale-idle-removals");
    thread.setDaemon(true);
    thread.start();
  }

  /**
   * The executors to remove when idle, replacing the previous ones (none: cancel), and the executors to keep at the
   * least. Those {@code idleNow} says have no running task are tried at once.
   */
  void want(String[] ids, int target, Predicate<String> idleNow) {
    Set<String> now = new HashSet<>(Arrays.asList(ids == null ? new String[0] : ids));
    keep = Math.max(0, target);
    wanted.retainAll(now);
    wanted.addAll(now);
    for (String id : now) {
      if (idleNow.test(id)) {
        idle.offer(id);
      }
    }
  }

  /** The listener saw the last running task of this executor end. Cheap: it runs on the listener's thread. */
  void executorIdle(String id) {
    if (!wanted.isEmpty() && wanted.contains(id)) {
      idle.offer(id);
    }
  }

  /** The executors killed since the last call. */
  String[] takeRemoved() {
    List<String> out = new ArrayList<>();
    for (String id; (id = removed.poll()) != null; ) {
      out.add(id);
    }
    return out.toArray(new String[0]);
  }

  private void run() {
    while (!closed) {
      String id;
      try {
        id = idle.poll(1, TimeUnit.SECONDS);
      } catch (InterruptedException e) {
        return;
      }
      if (id == null || !wanted.contains(id)) {
        continue;
      }
      try {
        // One Spark no longer lists is not counted anyway: forgotten, so a long-running application's
        // set holds only the removals still under way.
        killed.removeIf(gone -> !listed.test(gone));
        if (liveExcept.applyAsInt(killed) <= keep) {
          wanted.clear(); // executors were lost meanwhile: the target is met without these
          continue;
        }
        for (String gone : kill.apply(new String[] {id})) {
          wanted.remove(gone);
          killed.add(gone);
          removed.add(gone);
        }
      } catch (RuntimeException e) {
        // The next idle moment tries again; the control loop's own idle removals go on meanwhile.
        LOG.warn("could not remove idle executor {}: {}", id, e.toString());
      }
    }
  }

  /** How many executors it killed and had not seen Spark remove, as of its latest removal. */
  int killedListed() {
    return killed.size();
  }

  @Override
  public void close() {
    closed = true;
    wanted.clear();
    thread.interrupt();
  }
}
