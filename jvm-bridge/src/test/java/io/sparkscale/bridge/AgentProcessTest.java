package io.sparkscale.bridge;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;

import org.apache.spark.SparkConf;
import org.junit.jupiter.api.Test;

/** What {@link AgentProcess} reads from the configuration: whether to start, and which Python. */
class AgentProcessTest {
  @Test
  void anyLaunchButTheInJobOneStartsTheAgentWhichChecksTheValueItself() {
    assertFalse(AgentProcess.wanted(new SparkConf(false)));
    assertFalse(AgentProcess.wanted(new SparkConf(false).set(AgentProcess.LAUNCH_KEY, " job ")));
    assertTrue(AgentProcess.wanted(new SparkConf(false).set(AgentProcess.LAUNCH_KEY, "agent")));
    assertTrue(AgentProcess.wanted(new SparkConf(false).set(AgentProcess.LAUNCH_KEY, "agnet")));
  }

  @Test
  void thePythonIsTheKeysThenTheDriversAsPySparkPicksItThenPython3() {
    Map<String, String> env = Map.of("PYSPARK_DRIVER_PYTHON", "/env/driver", "PYSPARK_PYTHON", "/env/python");
    SparkConf conf = new SparkConf(false).set("spark.pyspark.python", "/conf/python");
    assertEquals("/conf/python", AgentProcess.python(conf, env));
    assertEquals("/conf/driver", AgentProcess.python(conf.clone().set("spark.pyspark.driver.python", "/conf/driver"),
        env));
    assertEquals("/conf/agent", AgentProcess.python(conf.clone().set(AgentProcess.PYTHON_KEY, "/conf/agent"), env));
    assertEquals("/env/driver", AgentProcess.python(new SparkConf(false), env));
    assertEquals("/env/python", AgentProcess.python(new SparkConf(false), Map.of("PYSPARK_PYTHON", "/env/python")));
    assertEquals("python3", AgentProcess.python(new SparkConf(false).set(AgentProcess.PYTHON_KEY, " "), Map.of()));
  }
}
