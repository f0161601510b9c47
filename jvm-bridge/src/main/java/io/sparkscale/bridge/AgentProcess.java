package io.sparkscale.bridge;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkContext;
import org.apache.spark.api.python.Py4JServer;
import org.apache.spark.api.python.PythonUtils;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The autoscaler as a child process of the driver ({@code spark.sparkscale.launch=agent}): for drivers whose user code
 * is not a Python process of ours (a Spark Connect server, pipelines, JVM jobs). It starts a py4j gateway in this JVM
 * with a secret, as spark-submit does for a PySpark application, and {@code python -m sparkscale_listener agent} with
 * the gateway's port and secret in PYSPARK_GATEWAY_PORT / PYSPARK_GATEWAY_SECRET, where pyspark connects to it. The
 * Python side runs the same autoscaler as the in-job launch; this class only keeps it running: its output goes to
 * the driver's log, an unexpected exit restarts it after a backoff (1 s, 2 s, 4 s... up to a minute) and posts an
 * AutoscalerEvent, and it ends with the driver.
 */
final class AgentProcess {
  static final String LAUNCH_KEY = "spark.sparkscale.launch";
  static final String PYTHON_KEY = "spark.sparkscale.launch.python";
  /** The in-job launch: the user's own Python process runs the autoscaler (autoscale(builder)). */
  static final String IN_JOB = "job";
  /** The agent's exit code when it refused the configuration: a restart cannot help. */
  static final int CONFIGURATION_REFUSED = 3;
  static final long FIRST_BACKOFF_MS = 1_000L;
  static final long MAX_BACKOFF_MS = 60_000L;
  // An agent that ran this long before it exited was healthy: the next backoff starts again at the first.
  static final long HEALTHY_RUN_MS = 60_000L;
  private static final long STOP_GRACE_MS = 5_000L;
  // Python's start and the package's imports: seconds, more on a busy machine.
  private static final long CHECK_TIMEOUT_MS = 120_000L;
  private static final String PYTHON_ADVICE = "set " + PYTHON_KEY + " to a Python with sparkscale-listener and "
      + "pyspark installed";
  private static final Set<String> LEVELS = Set.of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL");

  // The logger of the in-job launch's lines too: the driver log reads the same in both launches.
  private static final Logger LOG = LoggerFactory.getLogger("sparkscale");

  private final SparkContext sc;
  private final Py4JServer gateway;
  private final List<String> command;
  private final Map<String, String> env;
  private final Thread supervisor;
  private volatile boolean stopping;
  private volatile Process process;

  private AgentProcess(SparkContext sc, Py4JServer gateway, List<String> command, Map<String, String> env) {
    this.sc = sc;
    this.gateway = gateway;
    this.command = command;
    this.env = env;
    this.supervisor = new Thread(this::supervise, "sparkscale-agent");
    this.supervisor.setDaemon(true);
  }

  /**
   * Whether this application asked for the agent. Any value but the in-job launch's starts it: the agent checks the
   * key with every other one, and a wrong value is refused there with what is accepted (the keys are declared once,
   * in Python).
   */
  static boolean wanted(SparkConf conf) {
    return !IN_JOB.equals(conf.get(LAUNCH_KEY, IN_JOB).trim());
  }

  /** Starts the gateway and the agent (the SparkContext must be started: the agent attaches to it at once). */
  static AgentProcess start(SparkContext sc) {
    Py4JServer gateway = new Py4JServer(sc.conf());
    gateway.start();
    Map<String, String> env = environment();
    env.put("PYSPARK_GATEWAY_PORT", Integer.toString(gateway.getListeningPort()));
    env.put("PYSPARK_GATEWAY_SECRET", gateway.secret());
    // pyspark connects with py4j's ClientServer ("pinned threads") or its GatewayServer as this variable says; it
    // must name the kind Spark's Py4JServer made (from the same variable, read in this JVM).
    env.put("PYSPARK_PIN_THREAD", Boolean.toString(gateway.server() instanceof py4j.ClientServer));
    List<String> command = List.of(python(sc.conf(), System.getenv()), "-m", "sparkscale_listener", "agent");
    AgentProcess agent = new AgentProcess(sc, gateway, command, env);
    agent.supervisor.start();
    return agent;
  }

  /**
   * Checks the application's configuration with the agent's own checks, before the SparkContext has started anything
   * ({@code python -m sparkscale_listener agent --check}, the conf as a JSON object on its input): a key the autoscaler
   * refuses, or dynamic allocation left on, stops the driver here with the message the in-job launch gives. So does a
   * Python that cannot run the check (not found, or without the package): the agent could not run either, and would
   * be restarted in vain. Only a check that takes too long lets the application start without it.
   */
  static void checkConfiguration(SparkConf conf) {
    String python = python(conf, System.getenv());
    List<String> command = List.of(python, "-m", "sparkscale_listener", "agent", "--check");
    Map<String, String> settings = new LinkedHashMap<>();
    for (scala.Tuple2<String, String> entry : conf.getAll()) {
      settings.put(entry._1(), entry._2());
    }
    ProcessBuilder builder = new ProcessBuilder(new ArrayList<>(command)).redirectErrorStream(true);
    builder.environment().clear();
    builder.environment().putAll(environment());
    Process p;
    try {
      p = builder.start();
    } catch (IOException e) {
      throw new IllegalArgumentException("could not start the autoscaler's Python " + python + " ("
          + e.getMessage() + "): " + PYTHON_ADVICE);
    }
    StringBuilder output = new StringBuilder();
    Thread reader = new Thread(() -> collect(p, output), "sparkscale-agent-check");
    reader.setDaemon(true);
    reader.start();
    try (OutputStream in = p.getOutputStream()) {
      in.write(new ObjectMapper().writeValueAsBytes(settings));
    } catch (IOException e) {
      // It exited before it read: its exit code and output say why.
    }
    int code;
    try {
      if (!p.waitFor(CHECK_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
        p.destroyForcibly();
        LOG.error("the check of the autoscaler's configuration took over {} s; starting without it",
            CHECK_TIMEOUT_MS / 1000);
        return;
      }
      code = p.exitValue();
      reader.join(STOP_GRACE_MS);
    } catch (InterruptedException e) {
      p.destroyForcibly();
      Thread.currentThread().interrupt();
      return;
    }
    String said = output.toString().strip();
    if (code == CONFIGURATION_REFUSED) {
      throw new IllegalArgumentException(said.isEmpty() ? "the autoscaler refused the configuration" : said);
    }
    if (code != 0) {
      throw new IllegalArgumentException("the autoscaler's Python " + python + " could not check the configuration"
          + " (exit code " + code + "): " + said + "\n" + PYTHON_ADVICE);
    }
  }

  /** The agent's output, each line without the level the agent's log format starts it with. */
  private static void collect(Process p, StringBuilder output) {
    try (BufferedReader lines = new BufferedReader(
        new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
      for (String line = lines.readLine(); line != null; line = lines.readLine()) {
        synchronized (output) {
          output.append(withoutLevel(line)).append('\n');
        }
      }
    } catch (IOException e) {
      // The process ended: its output closed with it.
    }
  }

  private static String withoutLevel(String line) {
    int space = line.indexOf(' ');
    return space > 0 && LEVELS.contains(line.substring(0, space)) ? line.substring(space + 1) : line;
  }

  /** The agent's environment: the driver's, with the pyspark of this Spark on its path, as spark-submit gives it. */
  private static Map<String, String> environment() {
    Map<String, String> env = new LinkedHashMap<>(System.getenv());
    env.put("PYTHONUNBUFFERED", "1");
    String inherited = env.get("PYTHONPATH");
    String sparkPath = PythonUtils.sparkPythonPath();
    env.put("PYTHONPATH", inherited == null || inherited.isEmpty() ? sparkPath
        : sparkPath + File.pathSeparator + inherited);
    // A Spark Connect server's environment may name Connect: the agent is a classic PySpark driver process.
    env.remove("SPARK_CONNECT_MODE_ENABLED");
    env.remove("SPARK_REMOTE");
    return env;
  }

  /**
   * The Python that runs the agent: {@code spark.sparkscale.launch.python}, else the driver's Python as PySpark
   * chooses it (spark.pyspark.driver.python, spark.pyspark.python, PYSPARK_DRIVER_PYTHON, PYSPARK_PYTHON), else
   * python3.
   */
  static String python(SparkConf conf, Map<String, String> env) {
    for (String key : new String[] {PYTHON_KEY, "spark.pyspark.driver.python", "spark.pyspark.python"}) {
      String value = conf.get(key, "").trim();
      if (!value.isEmpty()) {
        return value;
      }
    }
    for (String name : new String[] {"PYSPARK_DRIVER_PYTHON", "PYSPARK_PYTHON"}) {
      String value = env.getOrDefault(name, "").trim();
      if (!value.isEmpty()) {
        return value;
      }
    }
    return "python3";
  }

  /** Ends the agent (asked to stop, then killed after a grace period) and the gateway. */
  void stop() {
    stopping = true;
    supervisor.interrupt();
    Process p = process;
    if (p != null) {
      p.destroy();
      try {
        if (!p.waitFor(STOP_GRACE_MS, TimeUnit.MILLISECONDS)) {
          p.destroyForcibly();
        }
      } catch (InterruptedException e) {
        p.destroyForcibly();
        Thread.currentThread().interrupt();
      }
    }
    try {
      gateway.shutdown();
    } catch (RuntimeException e) {
      LOG.debug("could not shut the agent's gateway down: {}", e.toString());
    }
  }

  private void supervise() {
    long backoff = FIRST_BACKOFF_MS;
    int restarts = 0;
    while (!stopping && !sc.isStopped()) {
      long started = System.currentTimeMillis();
      int code;
      try {
        code = run();
      } catch (IOException e) {
        // No such Python (or not executable): restarting would fail the same way.
        String reason = "could not start the autoscaler's process " + command + ": " + e.getMessage() + "; "
            + PYTHON_ADVICE;
        LOG.error(reason);
        post("error", reason, Map.of("situation", "agent-not-started"));
        return;
      } catch (InterruptedException e) {
        return; // stop() ends the process
      }
      if (stopping || sc.isStopped()) {
        return;
      }
      if (code == 0) {
        LOG.info("the autoscaler's process ended");
        return;
      }
      if (code == CONFIGURATION_REFUSED) {
        String reason = "the autoscaler's process refused the configuration (its error is in the driver log "
            + "above); the application runs without the autoscaler";
        LOG.error(reason);
        post("error", reason, Map.of("situation", "agent-refused-configuration"));
        return;
      }
      if (System.currentTimeMillis() - started >= HEALTHY_RUN_MS) {
        backoff = FIRST_BACKOFF_MS;
      }
      restarts++;
      String reason = "the autoscaler's process exited with code " + code + "; restarting it in "
          + backoff / 1000.0 + " s (restart " + restarts + ")";
      LOG.warn(reason);
      Map<String, Object> details = new LinkedHashMap<>();
      details.put("situation", "agent-restarted");
      details.put("exitCode", code);
      details.put("restarts", restarts);
      details.put("backoffMs", backoff);
      post("warning", reason, details);
      try {
        Thread.sleep(backoff);
      } catch (InterruptedException e) {
        return;
      }
      backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
    }
  }

  /** Runs the agent once, its output into the driver's log; returns its exit code. */
  private int run() throws IOException, InterruptedException {
    ProcessBuilder builder = new ProcessBuilder(new ArrayList<>(command)).redirectErrorStream(true);
    builder.environment().clear();
    builder.environment().putAll(env);
    LOG.info("starting the autoscaler's process: {}", String.join(" ", command));
    Process p = builder.start();
    process = p;
    p.getOutputStream().close(); // it reads nothing
    Thread pump = new Thread(() -> pump(p), "sparkscale-agent-output");
    pump.setDaemon(true);
    pump.start();
    int code = p.waitFor();
    pump.join(STOP_GRACE_MS); // its last lines (a traceback) before the exit is reported
    return code;
  }

  /**
   * Each line the agent writes, into the driver's log at the level its first word names (the agent's log format), the
   * level itself left out; a line without one (a traceback's) at the level of the line before.
   */
  private static void pump(Process p) {
    try (BufferedReader lines = new BufferedReader(
        new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
      String level = "INFO";
      for (String line = lines.readLine(); line != null; line = lines.readLine()) {
        int space = line.indexOf(' ');
        String first = space > 0 ? line.substring(0, space) : "";
        if (LEVELS.contains(first)) {
          level = first;
          line = line.substring(space + 1);
        }
        switch (level) {
          case "DEBUG" -> LOG.debug("{}", line);
          case "WARNING" -> LOG.warn("{}", line);
          case "ERROR", "CRITICAL" -> LOG.error("{}", line);
          default -> LOG.info("{}", line);
        }
      }
    } catch (IOException e) {
      // The process ended: its output closed with it.
    }
  }

  private void post(String severity, String reason, Map<String, ?> details) {
    try {
      if (!sc.isStopped()) {
        String kind = "error".equals(severity) ? "error" : "notice";
        sc.listenerBus().post(new AutoscalerEvent(kind, severity, reason, new LinkedHashMap<>(details),
            System.currentTimeMillis()));
      }
    } catch (RuntimeException e) {
      LOG.debug("could not post an agent event: {}", e.toString());
    }
  }
}
