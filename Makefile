# Two commands do everything on a fresh machine with Python 3.11 and a JDK 17:
#   make demo   - environment, bridge, and a real streaming job that scales up and down
#   make test   - environment, bridge, and the whole test suite
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
JAR := sparkscale_listener/jars/sparkscale-bridge.jar
JAVA_SOURCES := $(shell find jvm-bridge/src -name '*.java' 2>/dev/null)

.PHONY: env bridge test test-fast demo lint bench clean check-java browser

env: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "error: Python 3.11 not found (install python3.11)" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

check-java:
	@for tool in java javac jar; do command -v $$tool >/dev/null 2>&1 || { \
	  echo "error: '$$tool' not found. The JVM bridge needs a JDK 17 (java, javac, jar)." >&2; \
	  echo "       Debian/Ubuntu: apt-get install openjdk-17-jdk-headless" >&2; exit 1; }; done

bridge: $(JAR)

$(JAR): $(VENV)/.installed $(JAVA_SOURCES) jvm-bridge/build.sh
	@$(MAKE) --no-print-directory check-java
	bash jvm-bridge/build.sh "$$($(PY) -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')" $(JAR)

# Unit and simulator tests first (seconds), then each real-Spark file in its own process: a
# driver JVM keeps the first session's settings as system properties, which later sessions in the
# same process would inherit.
test: $(JAR) browser
	$(PY) -m pytest tests -m 'not spark'
	@set -e; for f in tests/integration/test_*.py; do echo "== $$f"; $(PY) -m pytest $$f; done

# The UI test renders the Autoscaler tab in headless Chromium (Debian's package). Installed when
# we can (root with apt-get); otherwise that one test skips and says how to install it.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the UI test (apt-get)"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium; the UI test will be skipped" >&2; \
	  else echo "note: chromium not found; the UI test will be skipped (apt-get install chromium)" >&2; fi; }

test-fast: $(VENV)/.installed
	$(PY) -m pytest tests -m 'not spark'

demo: $(JAR)
	$(PY) examples/demo.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

bench: $(JAR)
	$(PY) benchmarks/bench_listener_overhead.py

clean:
	rm -rf jvm-bridge/build $(JAR) .pytest_cache
