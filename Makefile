# Two commands do everything on a fresh machine with Python 3.10+ (3.11 preferred) and a JDK 17:
#   make demo   - environment, bridge, and a real streaming job that scales up and down
#   make test   - environment, bridge, and the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
# Apache Kafka's broker for the Kafka tests, resolved by Maven (see its rule below).
KAFKA_JARS := tests/kafka/target/lib/.resolved
# Apache Hadoop's YARN daemons for the YARN tests (tests/yarn_cluster.py starts them).
YARN_JARS := tests/yarn/target/lib/.resolved
# The Kubernetes tests' API server on loopback (fabric8's mock in CRUD mode behind a dispatcher of ours), built by Maven
# (tests/kubernetes_cluster.py starts it and the test kubelet).
K8S_SERVER := tests/kubernetes/target/lib/.resolved
# One bridge jar per supported Spark line; sparkscale_listener/bridge_jars.py picks the one that fits.
JAR := $(patsubst %,sparkscale_listener/jars/sparkscale-bridge-%.jar,spark3.5_2.12 spark3.5_2.13 spark4_2.13)
JAVA_SOURCES := $(shell find jvm-bridge/src -path jvm-bridge/src/test -prune -o -type f -print 2>/dev/null) \
  $(wildcard jvm-bridge/pom.xml jvm-bridge/lines/*/pom.xml jvm-bridge/.mvn/*.config)

.PHONY: env bridge test test-jvm test-fast demo lint bench bench-decisions bench-real clean check-java browser promtool \
  spark-lines wheel

env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: Python 3 not found (install python3.11)" >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { \
	  echo "error: $(PYTHON) is older than Python 3.10, which sparkscale needs (install python3.11)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

check-java:
	@for tool in java javac jar; do command -v $$tool >/dev/null 2>&1 || { \
	  echo "error: '$$tool' not found. The JVM bridge needs a JDK 17 (java, javac, jar)." >&2; \
	  echo "       Debian/Ubuntu: apt-get install openjdk-17-jdk-headless" >&2; exit 1; }; done

bridge: $(JAR)

# One Maven run builds all the jars (&: a grouped target, the recipe runs once for all of them), only when a
# source or pom changed; Maven itself needs no Python. The venv is an order-only prerequisite: `test` and
# `demo` get their environment through this rule, but a reinstalled venv does not make the jars stale.
$(JAR) &: $(JAVA_SOURCES) | $(VENV)/.installed
	@$(MAKE) --no-print-directory check-java
	@command -v mvn >/dev/null 2>&1 || { \
	  echo "error: 'mvn' not found. The JVM bridge is built with Maven 3.8+ (and a JDK 17)." >&2; \
	  echo "       Debian/Ubuntu: apt-get install maven" >&2; exit 1; }
	mvn --batch-mode --quiet -Dstyle.color=never -f jvm-bridge/pom.xml package
	@touch $(JAR)

# The JVM listener's unit tests (JUnit 5 through Maven: synthetic scheduler events, no cluster), for the
# spark4_2.13 line, run against the pip pyspark's jars (jvm-bridge/pom.xml, profile jvm-tests, says why).
PYSPARK_JARS = $(shell $(PY) -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')

test-jvm: $(JAR)
	mvn --batch-mode --quiet -Dstyle.color=never -f jvm-bridge/pom.xml -P jvm-tests -pl lines/spark4_2.13 test \
	  -Dmaven.test.additionalClasspath=$$(ls $(PYSPARK_JARS)/*.jar | paste -sd, -)

# The JVM listener's unit tests (test-jvm) first, then Python's unit and simulator tests (seconds),
# then each real-Spark file in its own process (a driver
# JVM keeps the first session's settings as system properties, which later sessions in the same
# process would inherit); a table of every file's result and seconds at the end.
test: $(JAR) browser promtool $(KAFKA_JARS) $(YARN_JARS) $(K8S_SERVER) spark-lines test-jvm
	$(PY) tests/run_suite.py

# The older Spark lines' virtualenvs (.venv-spark/) and every line's Kafka connector (Maven), made
# once before the tests, so their downloads are set-up time (tests/spark_lines.py; quick when done).
spark-lines: $(KAFKA_JARS) | $(VENV)/.installed
	@$(MAKE) --no-print-directory check-java
	$(PY) tests/spark_lines.py

# Apache Kafka's own broker and tools for the Kafka tests (tests/kafka_broker.py starts the broker),
# copied by Maven from its cache into tests/kafka/target/lib; the tests resolve Spark's Kafka
# connector for each Spark line themselves (tests/kafka/connector-pom.xml).
$(KAFKA_JARS): tests/kafka/pom.xml
	@$(MAKE) --no-print-directory check-java
	rm -rf tests/kafka/target/lib
	mvn --batch-mode --quiet -Dstyle.color=never -f tests/kafka/pom.xml dependency:copy-dependencies
	@touch $@

# Apache Hadoop's ResourceManager and NodeManager for the YARN tests (tests/yarn_cluster.py starts
# them on loopback), copied by Maven from its cache into tests/yarn/target/lib.
$(YARN_JARS): tests/yarn/pom.xml
	@$(MAKE) --no-print-directory check-java
	rm -rf tests/yarn/target/lib
	mvn --batch-mode --quiet -Dstyle.color=never -f tests/yarn/pom.xml dependency:copy-dependencies
	@touch $@

# The tests' Kubernetes API server: its jar and libraries (tests/kubernetes/pom.xml says what it is).
$(K8S_SERVER): tests/kubernetes/pom.xml $(shell find tests/kubernetes/src -name '*.java' 2>/dev/null)
	@$(MAKE) --no-print-directory check-java
	rm -rf tests/kubernetes/target/lib
	mvn --batch-mode --quiet -Dstyle.color=never -f tests/kubernetes/pom.xml package dependency:copy-dependencies
	@touch $@

# The UI test renders the Autoscaler tab in headless Chromium (Debian's package). Installed when
# we can (root with apt-get); otherwise that one test skips and says how to install it.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the UI test (apt-get)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium; the UI test will be skipped" >&2; \
	  else echo "note: chromium not found; the UI test will be skipped (apt-get install chromium)" >&2; fi; }

# The metrics test lints /autoscaler/metrics with promtool, a static binary taken out of Debian's
# prometheus package into the venv (installing the package would also start a Prometheus server).
# Without it that one test skips and says how to get it.
promtool: | $(VENV)/.installed
	@command -v promtool >/dev/null 2>&1 || test -x $(VENV)/bin/promtool || { \
	  tmp=$$(mktemp -d); \
	  if { (cd $$tmp && apt-get download prometheus) >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] \
	         && apt-get update -qq && (cd $$tmp && apt-get download prometheus) >/dev/null 2>&1; }; } \
	     && dpkg-deb -x $$tmp/prometheus_*.deb $$tmp/root && cp $$tmp/root/usr/bin/promtool $(VENV)/bin/; then \
	    echo "promtool (Debian's prometheus package) copied into $(VENV)/bin for the metrics test"; \
	  else echo "warning: could not get promtool (apt-get download prometheus); the metrics test will be skipped" >&2; fi; \
	  rm -rf $$tmp; }

test-fast: $(VENV)/.installed
	$(PY) -m pytest tests -m 'not spark' -n auto

demo: $(JAR)
	$(PY) examples/demo.py

# The wheel users install (README, Install): setup.py compiles the bridge jars into it with Maven.
wheel: $(VENV)/.installed
	@$(MAKE) --no-print-directory check-java
	$(PY) -m build --wheel --outdir dist .

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

# Benchmarks run on purpose, never in CI; each prints its numbers and writes benchmarks/results/.
# What running it costs: the bridge's event throughput, the snapshot, the tick, batch latency.
bench: $(JAR)
	$(PY) benchmarks/bench_cost.py

# Decision quality in the simulator: sparkscale against static sizing, Spark's dynamic allocation,
# the DStreams rule and an occupancy rule, on steps, a spike, a compressed day, a ramp, a backlog.
bench-decisions: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) benchmarks/bench_decisions.py

# The same comparison on real Spark (a loopback standalone cluster): sparkscale, static-peak,
# Spark's dynamic allocation and the occupancy rule (as sparkscale's evaluator), side by side on a
# step load and a compressed day (about 35 minutes).
bench-real: $(JAR)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	$(PY) benchmarks/bench_real_spark.py

clean:
	rm -rf jvm-bridge/build sparkscale_listener/jars .pytest_cache
