package io.sparkscale.tests.kubernetes;

import io.fabric8.kubernetes.client.server.mock.KubernetesMockServer;
import io.fabric8.mockwebserver.Context;
import io.fabric8.mockwebserver.MockWebServer;
import java.net.InetAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;

/**
 * A Kubernetes API server on loopback for the tests: fabric8's mock server in CRUD mode with
 * {@link SelectingDispatcher}. Usage: {@code LoopbackApiServer PORT_FILE}; it listens on a free port
 * of 127.0.0.1, writes the port to PORT_FILE once it serves, and runs until killed.
 */
public final class LoopbackApiServer {
  private LoopbackApiServer() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 1) {
      System.err.println("usage: LoopbackApiServer PORT_FILE");
      System.exit(2);
    }
    KubernetesMockServer server = new KubernetesMockServer(
        new Context(), new MockWebServer(), new HashMap<>(), new SelectingDispatcher(), false);
    server.init(InetAddress.getByName("127.0.0.1"), 0);
    Path portFile = Path.of(args[0]);
    Path partial = portFile.resolveSibling(portFile.getFileName() + ".partial");
    Files.writeString(partial, Integer.toString(server.getPort()), StandardCharsets.UTF_8);
    Files.move(partial, portFile);  // whole or absent: the test reads it as soon as it exists
    Runtime.getRuntime().addShutdownHook(new Thread(server::destroy));
    Thread.currentThread().join();
  }
}
