package io.sparkscale.bridge;

import java.lang.reflect.Field;
import java.net.Socket;
import java.net.SocketException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.WeakHashMap;

import py4j.DefaultGatewayServerListener;
import py4j.GatewayServer;
import py4j.Py4JServerConnection;

/**
 * Turns Nagle's algorithm off on the sockets of py4j's gateway, the way Python reaches the driver. py4j writes a
 * reply through an 8 KB buffer and leaves TCP_NODELAY off, so a reply of more than 8 KB sends its first 8 KB, holds
 * the rest until they are acknowledged, and Python's side acknowledges them only after its delayed-ACK timer: 44 ms
 * for every such reply, measured on loopback for replies of 9 KB to 300 KB, against 0.2-2 ms with the option on. A
 * poll of 1,000 executors is about 100 KB. Only makes replies go out sooner; best effort (nothing changes where it
 * cannot be set).
 */
final class Py4jReplies {
  /** The gateways given the listener that sets the option on connections they open later. */
  private static final Set<GatewayServer> LISTENING = Collections.newSetFromMap(new WeakHashMap<>());

  private Py4jReplies() {
  }

  /**
   * TCP_NODELAY on {@code server}'s connections now and on those it starts later; returns how many were set now.
   * {@code server} is Python's {@code gateway.java_gateway_server}: a {@link GatewayServer} (py4j's {@code JavaServer}
   * when PySpark pins threads, the default), else nothing is done.
   */
  static int withoutDelay(Object server) {
    if (!(server instanceof GatewayServer gateway)) {
      return 0;
    }
    synchronized (LISTENING) {
      if (LISTENING.add(gateway)) { // once per gateway, however many bridges Python makes
        gateway.addListener(new DefaultGatewayServerListener() {
          @Override
          public void connectionStarted(Py4JServerConnection connection) {
            noDelay(connection);
          }
        });
      }
    }
    int set = 0;
    for (Py4JServerConnection connection : current(gateway)) {
      set += noDelay(connection) ? 1 : 0;
    }
    return set;
  }

  /** The connections already open: py4j keeps them in a private list, with no getter. */
  private static List<Py4JServerConnection> current(GatewayServer gateway) {
    try {
      Field field = GatewayServer.class.getDeclaredField("connections");
      field.setAccessible(true);
      Object connections = field.get(gateway);
      if (connections instanceof List<?> list) {
        synchronized (list) {
          List<Py4JServerConnection> out = new ArrayList<>();
          for (Object c : list) {
            if (c instanceof Py4JServerConnection connection) {
              out.add(connection);
            }
          }
          return out;
        }
      }
    } catch (ReflectiveOperationException | RuntimeException e) {
      // Another py4j: the connections opened from now on still get the option.
    }
    return List.of();
  }

  private static boolean noDelay(Py4JServerConnection connection) {
    try {
      Socket socket = connection.getSocket();
      if (socket != null && !socket.isClosed()) {
        socket.setTcpNoDelay(true);
        return true;
      }
    } catch (SocketException | RuntimeException e) {
      // A connection closing as we go: nothing to speed up.
    }
    return false;
  }
}
