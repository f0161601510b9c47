"""A real YARN cluster for the tests: Apache Hadoop's ResourceManager and NodeManager on loopback.

Hadoop's own jars come from Maven Central: ``tests/yarn/pom.xml`` names them and :func:`yarn_jars`
has Maven copy them to ``tests/yarn/target/lib`` once (``make test`` runs the same step first).
:class:`YarnCluster` writes a Hadoop configuration directory (``core-site.xml``, ``yarn-site.xml``,
``capacity-scheduler.xml``), starts the two daemons, each in its own JVM, waits until the node
has registered with the ResourceManager, and stops them. Nothing here is a fake: Spark submits to
the ResourceManager through ``HADOOP_CONF_DIR``, and its ApplicationMaster and executors run in
containers the NodeManager launches.

No HDFS: the default file system is the local one, so Spark's staging directory and the
containers' resources are local paths (everything runs on this one machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from sparkscale_listener.testing.demo import wait_for

REPO = Path(__file__).resolve().parents[1]
YARN_POM = REPO / "tests" / "yarn" / "pom.xml"
YARN_LIB = REPO / "tests" / "yarn" / "target" / "lib"
_RESOLVED = YARN_LIB / ".resolved"
DAEMON_JVM_FLAGS = ("-Xmx384m", "-Xms64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
RESOURCE_MANAGER = "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager"
NODE_MANAGER = "org.apache.hadoop.yarn.server.nodemanager.NodeManager"
_LOG4J = """log4j.rootLogger={level}, out
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


# What the NodeManager logs once its shutdown has killed what was left of the containers.
_CONTAINERS_DEALT_WITH = "Done waiting for Applications to be Finished"
_FAILED_START = re.compile(r"ERROR Error starting (ResourceManager|NodeManager)")


class YarnError(RuntimeError):
    """A daemon failed or Maven could not resolve Hadoop's jars; the message carries the output."""


def yarn_jars() -> Path:
    """The directory of Hadoop's YARN jars, resolved by Maven on first use (and when the pom changed)."""
    if _RESOLVED.exists() and _RESOLVED.stat().st_mtime >= YARN_POM.stat().st_mtime:
        return YARN_LIB
    if shutil.which("mvn") is None:
        raise YarnError("the YARN cluster for the tests is resolved with Maven: 'mvn' not found "
                        "(Debian: apt-get install maven)")
    shutil.rmtree(YARN_LIB, ignore_errors=True)
    run = subprocess.run(["mvn", "--batch-mode", "--quiet", "-Dstyle.color=never", "-f", str(YARN_POM),
                          "dependency:copy-dependencies"], capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        raise YarnError(f"resolving Hadoop's YARN jars with Maven failed (exit {run.returncode}):\n"
                        f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    _RESOLVED.touch()
    return YARN_LIB


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _site_xml(properties: Mapping[str, str]) -> str:
    body = "".join(f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n"
                   for k, v in properties.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


@dataclass(frozen=True)
class Queue:
    """A CapacityScheduler queue under root: its share of the cluster, in percent, as a guarantee
    and as a hard ceiling."""

    name: str
    capacity_percent: float


class YarnCluster:
    """One ResourceManager and one NodeManager under ``workdir``, with ``node_memory_mb`` and
    ``node_vcores`` to hand out in containers. ``queues`` split the cluster (CapacityScheduler);
    each queue's ceiling is its capacity, so a queue too small for an application is a real limit."""

    def __init__(self, workdir: Path, node_memory_mb: int = 4096, node_vcores: int = 8,
                 min_allocation_mb: int = 128, queues: tuple[Queue, ...] = (Queue("default", 100),)) -> None:
        if abs(sum(q.capacity_percent for q in queues) - 100) > 1e-6:
            raise ValueError(f"queue capacities must add up to 100, got {queues}")
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.lib = yarn_jars()
        self.conf_dir = self.workdir / "conf"
        self.node_memory_mb = node_memory_mb
        self.node_vcores = node_vcores
        self.min_allocation_mb = min_allocation_mb
        self.queues = queues
        self.web_port = free_port()
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def log_dirs(self) -> Path:
        """The NodeManager's container log directories: ``<app id>/<container id>/`` each."""
        return self.workdir / "nm-logs"

    def _write_conf(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "core-site.xml").write_text(_site_xml({
            "fs.defaultFS": "file:///",
            "hadoop.tmp.dir": str(self.workdir / "tmp"),
        }), encoding="utf-8")
        rm = "127.0.0.1"
        (self.conf_dir / "yarn-site.xml").write_text(_site_xml({
            "yarn.resourcemanager.hostname": rm,
            "yarn.resourcemanager.address": f"{rm}:{free_port()}",
            "yarn.resourcemanager.scheduler.address": f"{rm}:{free_port()}",
            "yarn.resourcemanager.resource-tracker.address": f"{rm}:{free_port()}",
            "yarn.resourcemanager.admin.address": f"{rm}:{free_port()}",
            "yarn.resourcemanager.webapp.address": f"{rm}:{self.web_port}",
            "yarn.resourcemanager.scheduler.class":
                "org.apache.hadoop.yarn.server.resourcemanager.scheduler.capacity.CapacityScheduler",
            # Small containers: Spark asks for executor memory + overhead, rounded up to this.
            "yarn.scheduler.minimum-allocation-mb": str(self.min_allocation_mb),
            "yarn.scheduler.maximum-allocation-mb": str(self.node_memory_mb),
            "yarn.scheduler.maximum-allocation-vcores": str(self.node_vcores),
            "yarn.nodemanager.hostname": rm,
            "yarn.nodemanager.address": f"{rm}:{free_port()}",
            "yarn.nodemanager.localizer.address": f"{rm}:{free_port()}",
            "yarn.nodemanager.webapp.address": f"{rm}:{free_port()}",
            "yarn.nodemanager.resource.memory-mb": str(self.node_memory_mb),
            "yarn.nodemanager.resource.cpu-vcores": str(self.node_vcores),
            "yarn.nodemanager.local-dirs": str(self.workdir / "nm-local"),
            "yarn.nodemanager.log-dirs": str(self.log_dirs),
            # The JVMs' real footprint is not what YARN accounts for (it counts requested memory):
            # no container is killed for its virtual or physical size on this shared machine.
            "yarn.nodemanager.pmem-check-enabled": "false",
            "yarn.nodemanager.vmem-check-enabled": "false",
            # A nearly full disk would mark the node unhealthy and YARN would run nothing on it.
            "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "100",
            "yarn.nodemanager.disk-health-checker.min-free-space-per-disk-mb": "0",
            # Containers start java from JAVA_HOME, which the NodeManager passes on.
            "yarn.nodemanager.env-whitelist": "JAVA_HOME,PATH,LANG,TZ,HADOOP_CONF_DIR,HADOOP_HOME",
            "yarn.nodemanager.delete.debug-delay-sec": "600",  # keep container logs to read after a test
            "yarn.nodemanager.heartbeat.interval-ms": "250",
            "yarn.resourcemanager.nodemanagers.heartbeat-interval-ms": "250",
            "yarn.log-aggregation-enable": "false",
        }), encoding="utf-8")
        scheduler = {
            "yarn.scheduler.capacity.root.queues": ",".join(q.name for q in self.queues),
            # The ApplicationMasters of a small test cluster may take all of it (the default, 10 %,
            # would let no AM start in a small queue).
            "yarn.scheduler.capacity.maximum-am-resource-percent": "1.0",
            "yarn.scheduler.capacity.node-locality-delay": "-1",
        }
        for q in self.queues:
            prefix = f"yarn.scheduler.capacity.root.{q.name}"
            scheduler.update({
                f"{prefix}.capacity": f"{q.capacity_percent:g}",
                f"{prefix}.maximum-capacity": f"{q.capacity_percent:g}",
                # One user may take the whole queue (the default, 1, caps a user at the guarantee).
                f"{prefix}.user-limit-factor": "100",
                f"{prefix}.state": "RUNNING",
            })
        (self.conf_dir / "capacity-scheduler.xml").write_text(_site_xml(scheduler), encoding="utf-8")
        (self.conf_dir / "log4j.properties").write_text(_LOG4J.format(level="INFO"), encoding="utf-8")

    def _start(self, name: str, main_class: str) -> None:
        java = shutil.which("java") or "java"
        env = {**os.environ, "HADOOP_CONF_DIR": str(self.conf_dir), "YARN_CONF_DIR": str(self.conf_dir)}
        env.setdefault("JAVA_HOME", str(Path(os.path.realpath(java)).parents[1]))
        log = open(self.workdir / f"{name}.log", "wb")
        try:
            self.processes[name] = subprocess.Popen(
                [java, *DAEMON_JVM_FLAGS, f"-Dhadoop.log.dir={self.workdir}", "-Dlog4j.configuration="
                 f"file:{self.conf_dir / 'log4j.properties'}", "-cp", f"{self.conf_dir}:{self.lib}/*",
                 main_class], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                cwd=self.workdir)
        finally:
            log.close()

    def start(self, timeout_s: float = 180.0) -> YarnCluster:
        self._write_conf()
        self._start("resourcemanager", RESOURCE_MANAGER)
        self._start("nodemanager", NODE_MANAGER)

        def node_running() -> bool:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise YarnError(f"the {name} exited with {process.returncode}")
                # A daemon that failed to start may linger (its non-daemon threads): fail now.
                if _FAILED_START.search(self.log_tail(name, chars=1_000_000)):
                    raise YarnError(f"the {name} failed to start")
            try:
                return self.rest("cluster/metrics")["clusterMetrics"]["activeNodes"] >= 1
            except OSError:
                return False

        try:
            wait_for(node_running, timeout_s, poll_s=0.5, what="the NodeManager to register with the "
                     "ResourceManager")
        except (TimeoutError, YarnError) as err:
            tails = "\n".join(f"--- {n}\n{self.log_tail(n)}" for n in self.processes)
            self.stop()
            raise YarnError(f"{err}\n{tails}") from None
        return self

    def rest(self, path: str) -> Any:
        """A GET of the ResourceManager's REST API (``/ws/v1/<path>``), as JSON."""
        request = urllib.request.Request(f"{self.web_url}/ws/v1/{path}",
                                         headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    def applications(self) -> list[dict[str, Any]]:
        """Every application the ResourceManager knows, as its REST API reports them."""
        apps = self.rest("cluster/apps").get("apps") or {}
        return list(apps.get("app") or [])

    def containers_launched(self, app_id: str) -> list[str]:
        """The ids of every container the NodeManager launched for ``app_id`` (its log directories)."""
        app_logs = self.log_dirs / app_id
        return sorted(p.name for p in app_logs.iterdir()) if app_logs.is_dir() else []

    def log_tail(self, name: str, chars: int = 4000) -> str:
        try:
            return (self.workdir / f"{name}.log").read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError:
            return f"(no {name} log)"

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop the daemons (SIGTERM: a clean shutdown; the NodeManager kills its containers).

        The NodeManager is killed once it has dealt with its containers: what it does after that
        is 10 s of waiting on the log deletions it scheduled hours ahead (nothing a test reads).
        """
        for name in ("nodemanager", "resourcemanager"):
            process = self.processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            if name == "nodemanager":
                with contextlib.suppress(TimeoutError):
                    wait_for(lambda p=process: p.poll() is not None or _CONTAINERS_DEALT_WITH in
                             self.log_tail("nodemanager", chars=20_000), timeout_s, poll_s=0.2,
                             what="the NodeManager to stop its containers")
                process.kill()
            try:
                process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout_s)

    def __enter__(self) -> YarnCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
