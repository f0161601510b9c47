"""A real Apache Kafka broker for the tests: one KRaft node (broker and controller) on loopback.

Apache Kafka's own jars come from Maven Central: ``tests/kafka/pom.xml`` names them and
:func:`kafka_jars` has Maven copy them to ``tests/kafka/target/lib`` once (Maven caches the
downloads in ``~/.m2``; ``make test`` runs the same step first). :class:`KafkaBroker` formats a
fresh log directory, starts ``kafka.Kafka`` in its own JVM, waits until it serves, and stops it.
Topics are made and removed with Kafka's own command-line tools, and :class:`KeyedProducer` feeds a
topic through Kafka's console producer at a rate the test sets: nothing here is a fake.

Every record produced is ``k<id>`` -> ``<id>`` with ids 0, 1, 2, ... per producer, so a sink can
be checked for exactly-once delivery by count and distinct keys.
"""

from __future__ import annotations

import base64
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from sparkscale_listener.testing.demo import wait_for

REPO = Path(__file__).resolve().parents[1]
KAFKA_POM = REPO / "tests" / "kafka" / "pom.xml"
KAFKA_LIB = REPO / "tests" / "kafka" / "target" / "lib"
_RESOLVED = KAFKA_LIB / ".resolved"
# Small heaps and a quick-starting JIT for the short-lived tools; the machine has 2 cores.
TOOL_JVM_FLAGS = ("-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
BROKER_JVM_FLAGS = ("-Xmx384m", "-Xms128m", "-XX:+UseSerialGC")
_LOG4J = """status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
"""


class KafkaError(RuntimeError):
    """The broker or one of Kafka's tools failed; the message carries its output."""


def kafka_jars() -> Path:
    """The directory of Kafka's jars, resolved by Maven on first use (and again when the pom changed)."""
    if _RESOLVED.exists() and _RESOLVED.stat().st_mtime >= KAFKA_POM.stat().st_mtime:
        return KAFKA_LIB
    if shutil.which("mvn") is None:
        raise KafkaError("the Kafka broker for the tests is resolved with Maven: 'mvn' not found "
                         "(Debian: apt-get install maven)")
    shutil.rmtree(KAFKA_LIB, ignore_errors=True)
    run = subprocess.run(["mvn", "--batch-mode", "--quiet", "-Dstyle.color=never", "-f", str(KAFKA_POM),
                          "dependency:copy-dependencies"], capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        raise KafkaError(f"resolving Kafka's jars with Maven failed (exit {run.returncode}):\n"
                         f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    _RESOLVED.touch()
    return KAFKA_LIB


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_id() -> str:
    # Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding; never one that
    # starts with "-" (1 in 64), which the storage tool would read as an option (Kafka's own
    # generator draws again too).
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaBroker:
    """A single-node KRaft broker under ``workdir`` (logs, data, configuration)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.lib = kafka_jars()
        self.port = free_port()
        self.controller_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_file = self.workdir / "broker.log"
        self._tool_log4j = self.workdir / "tools-log4j2.properties"
        self._tool_log4j.write_text(_LOG4J.format(level="WARN"), encoding="utf-8")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _java(self, main_class: str, *args: str, flags: Sequence[str] = TOOL_JVM_FLAGS,
              log4j: Path | None = None) -> list[str]:
        java = shutil.which("java") or "java"
        config = log4j or self._tool_log4j
        return [java, *flags, f"-Dlog4j2.configurationFile={config}", "-cp", f"{self.lib}/*",
                main_class, *args]

    def start(self, timeout_s: float = 180.0) -> KafkaBroker:
        data = self.workdir / "data"
        properties = self.workdir / "server.properties"
        properties.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
            f"log.dirs={data}",
            # One node: every internal topic has one replica.
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # Topics exist only when a test makes them: a typo fails instead of making a new topic.
            "auto.create.topics.enable=false",
            "delete.topic.enable=true",
            "num.partitions=1",
            "",
        ]), encoding="utf-8")
        broker_log4j = self.workdir / "broker-log4j2.properties"
        broker_log4j.write_text(_LOG4J.format(level="INFO"), encoding="utf-8")
        self.tool("kafka.tools.StorageTool", "format", "--config", str(properties), "--cluster-id",
                  _cluster_id(), "--standalone", timeout_s=timeout_s)
        out = open(self.log_file, "wb")
        try:
            self.process = subprocess.Popen(
                self._java("kafka.Kafka", str(properties), flags=BROKER_JVM_FLAGS, log4j=broker_log4j),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir)
        finally:
            out.close()

        def serving() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise KafkaError(f"the Kafka broker exited with {self.process.returncode}:\n"
                                 f"{self.log_tail()}")
            return "Kafka Server started" in self.log_file.read_text(encoding="utf-8", errors="replace")

        try:
            wait_for(serving, timeout_s, poll_s=0.25, what="the Kafka broker to start")
        except TimeoutError as err:
            self.stop()
            raise TimeoutError(f"{err}\n{self.log_tail()}") from None
        return self

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_file.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return "(no broker log)"

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the broker (SIGTERM: a clean shutdown), killing it if it does not exit in time."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout_s)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> KafkaBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- Kafka's command-line tools --------------------------------------------------------

    def tool(self, main_class: str, *args: str, timeout_s: float = 120.0) -> str:
        """Run one of Kafka's command-line tools to completion; its stdout, or KafkaError."""
        run = subprocess.run(self._java(main_class, *args), capture_output=True, text=True,
                             timeout=timeout_s, cwd=self.workdir)
        if run.returncode != 0:
            raise KafkaError(f"{main_class} {' '.join(args)} failed (exit {run.returncode}):\n"
                             f"{run.stdout[-2000:]}\n{run.stderr[-3000:]}")
        return run.stdout

    def create_topic(self, name: str, partitions: int) -> None:
        self.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap, "--create",
                  "--topic", name, "--partitions", str(partitions), "--replication-factor", "1")

    def delete_topic(self, name: str) -> None:
        self.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap, "--delete",
                  "--topic", name)

    def topics(self) -> list[str]:
        out = self.tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap, "--list")
        return [line.strip() for line in out.splitlines() if line.strip()]

    def end_offsets(self, topic: str) -> dict[int, int]:
        """Each partition's latest offset (the next offset to be written)."""
        out = self.tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", self.bootstrap,
                        "--topic", topic, "--time", "-1")
        offsets = {}
        for line in out.splitlines():
            match = re.fullmatch(r"(.+):(\d+):(\d+)", line.strip())
            if match and match.group(1) == topic:
                offsets[int(match.group(2))] = int(match.group(3))
        return offsets

    def producer(self, topic: str, first_id: int = 0) -> KeyedProducer:
        return KeyedProducer(self, topic, first_id)


class KeyedProducer:
    """Kafka's console producer on one topic, fed ``k<id>\\t<id>`` lines from Python.

    :meth:`send` writes a number of records at once; :meth:`set_rate` paces records at a rate
    (per second) from a background thread, integrating the rate over time so that the count is
    exact whatever the thread's wake-ups. :meth:`close` ends the input and waits for the producer
    to flush and exit: after it, every record is in the broker's log.
    """

    def __init__(self, broker: KafkaBroker, topic: str, first_id: int = 0) -> None:
        self.topic = topic
        self.next_id = first_id
        self.first_id = first_id
        self._lock = threading.Lock()
        self._rate = 0.0
        self._owed = 0.0
        self._stop = threading.Event()
        self._log = open(broker.workdir / f"producer-{topic}-{first_id}.log", "wb")
        self.process = subprocess.Popen(
            broker._java("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", broker.bootstrap,
                         "--topic", topic, "--property", "parse.key=true", "--property", "key.separator=\t",
                         "--request-required-acks", "all", "--timeout", "20"),
            stdin=subprocess.PIPE, stdout=self._log, stderr=subprocess.STDOUT, cwd=broker.workdir)
        assert self.process.stdin is not None
        self._stdin: TextIO = open(self.process.stdin.fileno(), "w", encoding="utf-8",
                                   closefd=False)
        self._thread = threading.Thread(target=self._pace, name=f"producer-{topic}", daemon=True)
        self._thread.start()

    @property
    def produced(self) -> int:
        with self._lock:
            return self.next_id - self.first_id

    def send(self, count: int) -> None:
        with self._lock:
            self._write(count)

    def _write(self, count: int) -> None:
        if count <= 0:
            return
        ids = range(self.next_id, self.next_id + count)
        self._stdin.write("".join(f"k{i}\t{i}\n" for i in ids))
        self._stdin.flush()
        self.next_id += count

    def set_rate(self, records_per_second: float) -> None:
        if records_per_second < 0:
            raise ValueError(f"records_per_second must be >= 0, got {records_per_second}")
        with self._lock:
            self._rate = records_per_second

    def _pace(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(0.05):
            now = time.monotonic()
            with self._lock:
                self._owed += self._rate * (now - last)
                whole = int(self._owed)
                self._owed -= whole
                if self.process.poll() is None:
                    self._write(whole)
            last = now

    def close(self, timeout_s: float = 120.0) -> int:
        """Stop pacing, end the input, wait until the producer flushed and exited; the count sent."""
        self._stop.set()
        self._thread.join(timeout_s)
        with self._lock:
            self._stdin.close()
            self.process.stdin.close()  # type: ignore[union-attr]
        try:
            code = self.process.wait(timeout_s)
        finally:
            self._log.close()
        if code != 0:
            log = Path(self._log.name).read_text(encoding="utf-8", errors="replace")
            raise KafkaError(f"the console producer for {self.topic} exited with {code}:\n{log[-3000:]}")
        return self.produced

    def __enter__(self) -> KeyedProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            if exc[0] is None:
                self.close()
            else:
                self._stop.set()
                self.process.kill()


# ---------------------------------------------------------------------------------------------
# Spark's Kafka connector, as a directory of jars for spark.jars

CONNECTOR_POM = REPO / "tests" / "kafka" / "connector-pom.xml"
CONNECTOR_ROOT = REPO / "tests" / "kafka" / "target"
MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"
_JAR_NAME = re.compile(r"^(?P<artifact>.+?)-\d[\w.\-]*\.jar$")


def _resolve_connector(version: str, scala: str, directory: Path) -> bool:
    shutil.rmtree(directory, ignore_errors=True)
    run = subprocess.run(["mvn", "--batch-mode", "--quiet", "-Dstyle.color=never", "-f", str(CONNECTOR_POM),
                          "dependency:copy-dependencies", f"-Dscala.binary={scala}",
                          f"-Dconnector.version={version}", f"-Dconnector.dir={directory}"],
                         capture_output=True, text=True, timeout=900)
    return run.returncode == 0 and any(directory.glob("spark-sql-kafka-0-10_*.jar"))


def _published_releases(scala: str) -> list[str]:
    """The connector's releases that Maven Central lists (one read of its maven-metadata.xml)."""
    import urllib.request
    url = f"{MAVEN_CENTRAL}/org/apache/spark/spark-sql-kafka-0-10_{scala}/maven-metadata.xml"
    with urllib.request.urlopen(url, timeout=60) as response:
        text = response.read().decode("utf-8")
    return re.findall(r"<version>(\d+\.\d+\.\d+)</version>", text)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def connector_jars(spark_version: str, scala: str, spark_jars_dir: Path) -> tuple[str, list[Path]]:
    """(connector version, its jars) for this Spark: ``spark-sql-kafka-0-10_<scala>`` and what it
    needs at run time, less what Spark ships itself, resolved by Maven once per Spark version.

    The connector of the Spark's own version is used when Maven Central serves it with all its
    dependencies; otherwise (a pyspark released before its connector, or a repository that lacks
    part of a release) the newest earlier release of the same major line that does.
    """
    if shutil.which("mvn") is None:
        raise KafkaError("Spark's Kafka connector for the tests is resolved with Maven: 'mvn' not found "
                         "(Debian: apt-get install maven)")
    directory = CONNECTOR_ROOT / f"connector-spark{spark_version}_{scala}"
    stamp = directory / ".version"
    if not (stamp.exists() and stamp.stat().st_mtime >= CONNECTOR_POM.stat().st_mtime):
        version = spark_version if _resolve_connector(spark_version, scala, directory) else None
        if version is None:
            major = spark_version.split(".")[0]
            earlier = sorted((v for v in _published_releases(scala)
                              if v.split(".")[0] == major and _version_key(v) < _version_key(spark_version)),
                             key=_version_key, reverse=True)
            version = next((v for v in earlier[:4] if _resolve_connector(v, scala, directory)), None)
        if version is None:
            raise KafkaError(f"no spark-sql-kafka-0-10_{scala} connector for Spark {spark_version} "
                             "could be resolved from Maven Central")
        stamp.write_text(version, encoding="utf-8")
    version = stamp.read_text(encoding="utf-8").strip()
    shipped = {m.group("artifact") for p in spark_jars_dir.glob("*.jar") if (m := _JAR_NAME.match(p.name))}
    jars = sorted(p for p in directory.glob("*.jar")
                  if not ((m := _JAR_NAME.match(p.name)) and m.group("artifact") in shipped))
    return version, jars
