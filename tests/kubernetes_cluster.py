"""Kubernetes on loopback for the tests: an API server, and a kubelet that runs pods as local processes.

Spark's own Kubernetes backend (``--master k8s://http://127.0.0.1:PORT``) talks to them over HTTP
exactly as it would to a cluster; nothing of Spark is replaced.

:class:`ApiServer` is fabric8's ``kubernetes-server-mock`` in CRUD mode (it stores what it is sent
and serves it back, lists, watches and finalizers included), built with Maven from
``tests/kubernetes/`` behind a dispatcher of ours that adds what Spark needs from a real server:
pods created ``Pending``, set-based label selectors and field selectors on lists and collection
deletes (``LoopbackApiServer.java`` / ``SelectingDispatcher.java``).

:class:`TestKubelet` stands in for the kubelet *and* the container runtime of one node, and for
nothing else. It polls the server's pods, and for each executor pod it:

- puts a finalizer on it, so that a delete first marks the pod (``deletionTimestamp``) and the pod
  is gone only once its process has ended, as on a real node;
- leaves it ``Pending`` while a node is "being provisioned" (:meth:`TestKubelet.hold_pending`) or
  for good while the node is full (:attr:`TestKubelet.capacity`);
- then runs what the Spark image's entrypoint runs for an executor (``KubernetesExecutorBackend``
  with the pod's environment, its ``SPARK_JAVA_OPT_<n>`` options in order, the pod's IP and name
  from their field references) and reports the pod ``Running``;
- on delete, ends the process (SIGTERM, SIGKILL after the grace period), reports the pod
  ``Failed`` with exit 143 and releases its finalizer;
- reports a process that ends by itself ``Succeeded`` (exit 0, as a decommissioned executor) or
  ``Failed``; and evicts or OOM-kills a running pod on request (:meth:`TestKubelet.evict`,
  :meth:`TestKubelet.oom_kill`).

Every executor process is counted (:attr:`TestKubelet.started`, :attr:`TestKubelet.ended`) so that
tests can assert pods and processes, not only what Spark says.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

from sparkscale_listener.testing.demo import wait_for

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "kubernetes"
SERVER_JAR = PROJECT / "target" / "kubernetes-api-server-1.jar"
SERVER_LIB = PROJECT / "target" / "lib"
_RESOLVED = SERVER_LIB / ".resolved"
SPARK_HOME = Path(pyspark.__file__).parent
FINALIZER = "sparkscale.test/kubelet"
SERVER_JVM_FLAGS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class KubernetesError(RuntimeError):
    """The API server could not be built or started, or refused a request; the message says why."""


def server_jars() -> Path:
    """The server's jar and its libraries, built by Maven on first use (and when a source changed)."""
    sources = [PROJECT / "pom.xml", *PROJECT.glob("src/**/*.java")]
    if _RESOLVED.exists() and all(_RESOLVED.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return SERVER_LIB
    if shutil.which("mvn") is None:
        raise KubernetesError("the tests' Kubernetes API server is built with Maven: 'mvn' not found "
                              "(Debian: apt-get install maven)")
    run = subprocess.run(["mvn", "--batch-mode", "--quiet", "-Dstyle.color=never", "-f",
                          str(PROJECT / "pom.xml"), "package", "dependency:copy-dependencies"],
                         capture_output=True, text=True, timeout=900)
    if run.returncode != 0:
        raise KubernetesError("building the Kubernetes API server failed:\n"
                              f"{run.stdout[-3000:]}{run.stderr[-3000:]}")
    _RESOLVED.touch()
    return SERVER_LIB


class ApiServer:
    """The API server in its own JVM on a free port of 127.0.0.1; :meth:`request` speaks JSON to it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log = workdir / "apiserver.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 120.0) -> ApiServer:
        lib = server_jars()
        self.workdir.mkdir(parents=True, exist_ok=True)
        port_file = self.workdir / "apiserver.port"
        port_file.unlink(missing_ok=True)
        classpath = os.pathsep.join([str(SERVER_JAR), str(lib / "*")])
        with open(self._log, "wb") as log:
            self._process = subprocess.Popen(
                ["java", *SERVER_JVM_FLAGS, "-cp", classpath,
                 "io.sparkscale.tests.kubernetes.LoopbackApiServer", str(port_file)],
                stdout=log, stderr=subprocess.STDOUT)

        def serving() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise KubernetesError(f"the API server exited ({self._process.returncode}):\n"
                                      f"{self.log_tail()}")
            if not port_file.exists():
                return False
            self.port = int(port_file.read_text())
            return True

        wait_for(serving, timeout_s, what="the Kubernetes API server")
        return self

    def log_tail(self, chars: int = 4000) -> str:
        return self._log.read_text(errors="replace")[-chars:] if self._log.exists() else ""

    def request(self, method: str, path: str, body: Any = None, none_on: tuple[int, ...] = ()) -> Any:
        """The reply's JSON (None when empty); an HTTP error whose status is in ``none_on`` gives None too."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as reply:
                text = reply.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as err:
            if err.code in none_on:
                return None
            raise KubernetesError(f"{method} {path}: HTTP {err.code} {err.read()[:500]!r}") from err

    def pods(self, namespace: str | None = None, **labels: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"
        if labels:
            selector = ",".join(f"{k}={v}" for k, v in labels.items())
            path += "?labelSelector=" + urllib.request.quote(selector)
        return list((self.request("GET", path) or {}).get("items", []))

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)

    def __enter__(self) -> ApiServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    """A pod's processes are a group of their own (a driver's JVM and its Python): all of them get it."""
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        pass  # already gone


def pod_key(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"{meta.get('namespace', 'default')}/{meta['name']}"


def pod_path(pod: Mapping[str, Any]) -> str:
    meta = pod["metadata"]
    return f"/api/v1/namespaces/{meta.get('namespace', 'default')}/pods/{meta['name']}"


@dataclass
class PodRun:
    """One pod this kubelet has seen: when it may start, its process, how it ended."""

    key: str
    role: str  # "executor" or "driver"
    seen_at: float
    start_after: float  # monotonic time from which it may run (inf: held for good)
    process: subprocess.Popen[bytes] | None = None
    started_at: float | None = None
    ended: str | None = None  # "Succeeded", "Failed", "Evicted", "OOMKilled", "Deleted"
    exit_code: int | None = None
    log: Path | None = None


@dataclass
class TestKubelet:
    """A node of ``capacity`` executor pods whose processes run here (see the module's docstring)."""

    __test__ = False  # not a pytest class

    server: ApiServer
    workdir: Path
    capacity: int = 1000
    poll_s: float = 0.2
    grace_s: float = 10.0
    runs: dict[str, PodRun] = field(default_factory=dict)
    pending_for_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    # -- what a test controls -----------------------------------------------------------------

    def hold_pending(self, seconds: float) -> None:
        """Pods created from now on stay Pending this long first (a node being provisioned)."""
        self.pending_for_s = seconds

    def set_capacity(self, pods: int) -> None:
        """At most this many executor pods run at once; the rest stay Pending (the node is full)."""
        self.capacity = pods

    def evict(self, name: str) -> None:
        """The node evicts the pod: its process is killed and the pod reported Failed (Evicted)."""
        self._kill(name, "Evicted", reason="Evicted", exit_code=137)

    def oom_kill(self, name: str) -> None:
        """The container is OOM-killed: exit 137, reason OOMKilled, the pod Failed."""
        self._kill(name, "OOMKilled", reason="OOMKilled", exit_code=137)

    # -- what a test reads --------------------------------------------------------------------

    @property
    def started(self) -> list[str]:
        """The pods whose process was started, in order."""
        with self._lock:
            return [r.key for r in sorted(self.runs.values(), key=lambda r: r.started_at or 0.0)
                    if r.started_at is not None and r.role == "executor"]

    @property
    def running(self) -> list[str]:
        with self._lock:
            return [r.key for r in self.runs.values()
                    if r.role == "executor" and r.process is not None and r.ended is None]

    @property
    def ended(self) -> dict[str, str]:
        """Pod -> how its process ended."""
        with self._lock:
            return {r.key: r.ended for r in self.runs.values()
                    if r.ended is not None and r.role == "executor"}

    def driver(self, name_prefix: str) -> PodRun | None:
        """The newest driver pod whose name starts so (cluster mode)."""
        with self._lock:
            drivers = [r for r in self.runs.values() if r.role == "driver"
                       and r.key.split("/")[1].startswith(name_prefix)]
        return max(drivers, key=lambda r: r.seen_at) if drivers else None

    def kill(self, name: str, ended: str | None = None) -> PodRun:
        """The pod's process and its children die at once (SIGKILL): a crashed driver, a lost node.
        The pod is then reported as its process ended, like any other; with ``ended`` the caller
        reports it instead (the loop must not report a plain failure first)."""
        with self._lock:
            run = next((r for r in self.runs.values() if r.key.endswith("/" + name)), None)
            if run is None or run.process is None:
                raise KubernetesError(f"no running pod {name!r} on this kubelet")
            run.ended = ended or run.ended
        _signal_group(run.process, signal.SIGKILL)
        run.process.wait(30)
        return run

    # -- the loop -----------------------------------------------------------------------------

    def start(self) -> TestKubelet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._loop, name="test-kubelet", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            runs = [r for r in self.runs.values() if r.process is not None and r.process.poll() is None]
        for run in runs:
            assert run.process is not None
            _signal_group(run.process, signal.SIGKILL)
            run.process.wait(10)

    def __enter__(self) -> TestKubelet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception:  # a test reads errors; the loop must go on
                self.errors.append(traceback.format_exc(limit=3))
            self._stop.wait(self.poll_s)

    def _sync(self) -> None:
        pods = {pod_key(p): p for p in self.server.pods()
                if p["metadata"].get("labels", {}).get("spark-role") in ("executor", "driver")}
        now = time.monotonic()
        for key, pod in pods.items():
            run = self.runs.get(key)
            if run is None:
                role = pod["metadata"]["labels"]["spark-role"]
                run = PodRun(key, role, now, now + (self.pending_for_s if role == "executor" else 0.0))
                with self._lock:
                    self.runs[key] = run
                if not pod["metadata"].get("deletionTimestamp"):
                    self._update(pod, lambda p: p["metadata"].setdefault("finalizers", []).append(FINALIZER))
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self._terminate(run, pod)
            elif run.ended is None and run.process is not None and run.process.poll() is not None:
                code = run.process.returncode
                self._finish(run, pod, "Succeeded" if code == 0 else "Failed", code)
            elif run.process is None and run.ended is None and now >= run.start_after \
                    and (run.role == "driver" or self._room()):
                self._run(run, pod)
        for key, run in list(self.runs.items()):  # gone from the server: nothing may keep running
            if key not in pods and run.process is not None and run.process.poll() is None:
                _signal_group(run.process, signal.SIGKILL)
                run.process.wait(10)
                run.ended = run.ended or "Deleted"

    def _room(self) -> bool:
        with self._lock:
            return sum(r.role == "executor" and r.process is not None and r.ended is None
                       for r in self.runs.values()) < self.capacity

    def _update(self, pod: dict[str, Any], change: Any) -> dict[str, Any] | None:
        """Read, change and write the pod back (again on a conflict); None when it is gone."""
        for _ in range(5):
            try:
                current = self.server.request("GET", pod_path(pod))
            except KubernetesError:
                return None
            if current is None:
                return None
            change(current)
            try:
                return self.server.request("PUT", pod_path(pod), current)  # None: the pod is gone
            except KubernetesError as err:
                if "HTTP 409" not in str(err):
                    raise
        raise KubernetesError(f"pod {pod_key(pod)}: conflicts on every update")

    def _run(self, run: PodRun, pod: dict[str, Any]) -> None:
        container = pod["spec"]["containers"][0]
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_CONF_DIR")}
        options: list[tuple[int, str]] = []
        for item in container.get("env", []):
            value = item.get("value")
            ref = (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            if ref == "status.podIP":
                value = "127.0.0.1"
            elif ref == "metadata.name":
                value = pod["metadata"]["name"]
            elif ref == "metadata.namespace":
                value = pod["metadata"].get("namespace", "default")
            if value is None:
                continue
            env[item["name"]] = value
            if item["name"].startswith("SPARK_JAVA_OPT_"):
                options.append((int(item["name"].rsplit("_", 1)[1]), value))
        pod_dir = self.workdir / pod["metadata"]["name"]
        (pod_dir / "local").mkdir(parents=True, exist_ok=True)
        mounts = self._mount_config_maps(pod, container, pod_dir)
        if mounts is None:
            return  # a config map it mounts is not there yet: the pod waits, as on a node
        # The image's layout, here: Spark is the pyspark folder, each pod has its own scratch space,
        # and a config map the pod mounts is a folder of the pod's.
        env.update(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_DIRS=str(pod_dir / "local"),
                   SPARK_CONF_DIR=mounts.get(env.get("SPARK_CONF_DIR", ""), str(pod_dir)),
                   PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable), SPARK_LOCAL_IP="127.0.0.1",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
        if run.role == "driver":
            command = self._driver_command(container, mounts)
        else:
            command = self._executor_command(pod, env, options, pod_dir)
        self._start(run, pod, container, command, env, pod_dir)

    @staticmethod
    def _executor_command(pod: dict[str, Any], env: dict[str, str], options: list[tuple[int, str]],
                          pod_dir: Path) -> list[str]:
        """What the Spark image's entrypoint runs for an executor."""
        memory = env.get("SPARK_EXECUTOR_MEMORY", "512m")
        return ["java", *(o for _, o in sorted(options)), f"-Xms{memory}", f"-Xmx{memory}",
                   "-cp", f"{pod_dir}{os.pathsep}{SPARK_HOME / 'jars'}/*",
                   "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend",
                   "--driver-url", env["SPARK_DRIVER_URL"], "--executor-id", env["SPARK_EXECUTOR_ID"],
                   "--cores", env.get("SPARK_EXECUTOR_CORES", "1"), "--app-id", env["SPARK_APPLICATION_ID"],
                   "--hostname", "127.0.0.1",
                   "--resourceProfileId", env.get("SPARK_RESOURCE_PROFILE_ID", "0"),
                   "--podName", pod["metadata"]["name"]]

    @staticmethod
    def _driver_command(container: dict[str, Any], mounts: dict[str, str]) -> list[str]:
        """What the Spark image's entrypoint runs for a driver (cluster mode): spark-submit in client
        mode inside the pod, with the pod's arguments (its properties file is in a mounted config map)."""
        args = list(container.get("args", []))
        assert args and args[0] == "driver", f"a driver pod's arguments: {args}"
        for i, arg in enumerate(args):
            for mount, folder in mounts.items():
                if arg.startswith(mount + "/"):
                    args[i] = folder + arg[len(mount):]
        return [str(Path(sys.executable).parent / "spark-submit"),
                "--conf", "spark.driver.bindAddress=127.0.0.1",
                "--conf", "spark.executorEnv.SPARK_DRIVER_POD_IP=127.0.0.1",
                "--deploy-mode", "client", *args[1:]]

    def _mount_config_maps(self, pod: dict[str, Any], container: dict[str, Any],
                           pod_dir: Path) -> dict[str, str] | None:
        """Write each config map volume the container mounts into a folder of the pod's; mount path ->
        folder. None while one of them does not exist yet (Spark creates a driver's after its pod)."""
        volumes = {v["name"]: v["configMap"] for v in pod["spec"].get("volumes", []) if v.get("configMap")}
        mounts: dict[str, str] = {}
        namespace = pod["metadata"].get("namespace", "default")
        for mount in container.get("volumeMounts", []):
            source = volumes.get(mount["name"])
            if source is None:
                continue
            path = f"/api/v1/namespaces/{namespace}/configmaps/{source['name']}"
            found = self.server.request("GET", path, none_on=(404,))
            if found is None:
                return None
            data = found.get("data", {})
            folder = pod_dir / "volumes" / mount["name"]
            folder.mkdir(parents=True, exist_ok=True)
            items = source.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                (folder / item["path"]).write_text(data.get(item["key"], ""), encoding="utf-8")
            mounts[mount["mountPath"].rstrip("/")] = str(folder)
        return mounts

    def _start(self, run: PodRun, pod: dict[str, Any], container: dict[str, Any], command: list[str],
               env: dict[str, str], pod_dir: Path) -> None:
        run.log = pod_dir / f"{run.role}.log"
        with open(run.log, "wb") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=pod_dir,
                                       start_new_session=True)
        with self._lock:
            run.process, run.started_at = process, time.monotonic()

        def running(p: dict[str, Any]) -> None:
            p["status"] = {**p.get("status", {}), "phase": "Running",
                           "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
                           "containerStatuses": [{"name": container["name"], "ready": True, "restartCount": 0,
                                                  "image": container.get("image", ""),
                                                  "state": {"running": {}}}]}

        self._update(pod, running)

    def _terminate(self, run: PodRun, pod: dict[str, Any]) -> None:
        """A pod marked for deletion: end its process (SIGTERM, then SIGKILL), report, release it."""
        if run.process is not None and run.process.poll() is None:
            _signal_group(run.process, signal.SIGTERM)
            try:
                run.process.wait(self.grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(run.process, signal.SIGKILL)
                run.process.wait(10)
        if run.ended is None:
            code = run.process.returncode if run.process is not None else None
            self._finish(run, pod, "Deleted", 143 if code is None or code < 0 else code)

        def release(p: dict[str, Any]) -> None:
            p["metadata"]["finalizers"] = [f for f in p["metadata"].get("finalizers", []) if f != FINALIZER]

        self._update(pod, release)

    def _kill(self, name: str, ended: str, reason: str, exit_code: int) -> None:
        run = self.kill(name, ended)
        pod = self.server.request("GET", f"/api/v1/namespaces/{run.key.split('/')[0]}/pods/{name}")
        self._finish(run, pod, ended, exit_code, reason=reason)

    def _finish(self, run: PodRun, pod: dict[str, Any], ended: str, exit_code: int | None,
                reason: str | None = None) -> None:
        with self._lock:
            run.ended, run.exit_code = ended, exit_code
        phase = "Succeeded" if exit_code == 0 else "Failed"
        terminated: dict[str, Any] = {"exitCode": exit_code if exit_code is not None else 143,
                                      "reason": reason or ("Completed" if exit_code == 0 else "Error")}

        def finished(p: dict[str, Any]) -> None:
            status = p.setdefault("status", {})
            status["phase"] = phase
            if reason == "Evicted":
                status["reason"] = "Evicted"
            name = p["spec"]["containers"][0]["name"]
            status["containerStatuses"] = [{"name": name, "ready": False, "restartCount": 0,
                                            "image": p["spec"]["containers"][0].get("image", ""),
                                            "state": {"terminated": terminated}}]

        self._update(pod, finished)
