"""Checks a bridge jar against a real Spark: run it with the Python of an environment that has pyspark.

    <venv>/bin/python jvm-bridge/verify/verify_spark_line.py [--jar JAR] [--ui-port PORT] [--keep-logs]

Without --jar it picks the jar with sparkscale_listener.spark.jars for the Spark that pyspark will launch
(SPARK_HOME, else the pip package), which checks that choice too. It then

1. links the jar statically: every Spark, Scala, servlet, Jackson, metrics and slf4j member its classes
   reference (from `javap -c`) must exist in this Spark's jars, so paths the run below does not take (task
   failures, say) cannot throw NoSuchMethodError either;
2. starts a local-cluster[2,1,1024] session with spark.jars=<jar>, spark.plugins=SparkscalePlugin, an event
   log and the UI on a free port, runs a small job, and checks through py4j: the plugin is installed, the
   snapshot has both executors and the job's tasks, the py4j version probe picks the same jar, the Autoscaler
   tab serves HTML at /autoscaler/ with the document built from two posted ticks, gauges,
   requestTotalExecutors, decommissionExecutors and killExecutors answer;
3. stops the session and finds the posted ScalingEvent and AutoscalerEvent in the event log file, and of the
   two ticks only the one to keep (the other's logEvent is false), and reads one back with Spark's own
   JsonProtocol (what the history server does).

Exit status 0 when every check passed. Needs `javap` (a JDK) for step 1 and network access to nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sparkscale_listener.spark import jars as bridge_jars  # noqa: E402

PLUGIN = "io.sparkscale.bridge.SparkscalePlugin"
T = TypeVar("T")
results: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    results.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}{': ' + detail if detail else ''}", flush=True)
    return ok


def wait_for(probe: Callable[[], T], ok: Callable[[T], bool], timeout: float) -> T:
    deadline = time.monotonic() + timeout
    value = probe()
    while not ok(value) and time.monotonic() < deadline:
        time.sleep(0.2)
        value = probe()
    return value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_jars_dir() -> Path:
    """The jars of the Spark pyspark launches (same rule as bridge_jars.installed_versions)."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


# ---------------------------------------------------------------- 1. static linkage

_REF = re.compile(r"// (Method|InterfaceMethod|Field) ([\w/$]+)\.(\"?[\w$<>]+\"?):(\S+)")
_CHECKED = ("org/apache/spark/", "scala/", "javax/servlet/", "jakarta/servlet/", "com/fasterxml/",
            "com/codahale/", "org/slf4j/")

_LINK_CHECKER = """
import java.lang.invoke.MethodType;
import java.lang.reflect.*;
import java.nio.file.*;
import java.util.*;

public class LinkCheck {
  public static void main(String[] args) throws Exception {
    int missing = 0;
    for (String line : Files.readAllLines(Path.of(args[0]))) {
      String[] p = line.split(" ");  // kind owner name descriptor
      String owner = p[1].replace('/', '.');
      try {
        Class<?> c = Class.forName(owner, false, LinkCheck.class.getClassLoader());
        if (!has(c, p[0], p[2], p[3])) { System.out.println("MISSING " + line); missing++; }
      } catch (ClassNotFoundException | LinkageError e) {
        System.out.println("MISSING " + line + " (" + e + ")"); missing++;
      }
    }
    System.exit(missing == 0 ? 0 : 1);
  }

  static boolean has(Class<?> c, String kind, String name, String desc) {
    Deque<Class<?>> todo = new ArrayDeque<>(List.of(c));
    Set<Class<?>> seen = new HashSet<>();
    while (!todo.isEmpty()) {
      Class<?> k = todo.pop();
      if (!seen.add(k)) continue;
      if (kind.equals("Field")) {
        for (Field f : k.getDeclaredFields())
          if (f.getName().equals(name) && MethodType.methodType(f.getType()).toMethodDescriptorString()
              .substring(2).equals(desc)) return true;
      } else if (name.equals("<init>")) {
        for (Constructor<?> m : k.getDeclaredConstructors())
          if (MethodType.methodType(void.class, m.getParameterTypes()).toMethodDescriptorString()
              .equals(desc)) return true;
        return false;  // constructors are not inherited
      } else {
        for (Method m : k.getDeclaredMethods())
          if (m.getName().equals(name) && MethodType.methodType(m.getReturnType(), m.getParameterTypes())
              .toMethodDescriptorString().equals(desc)) return true;
      }
      if (k.getSuperclass() != null) todo.add(k.getSuperclass());
      todo.addAll(List.of(k.getInterfaces()));
    }
    return false;
  }
}
"""


def static_linkage(jar: Path, jars_dir: Path, workdir: Path) -> None:
    javap, java = shutil.which("javap"), shutil.which("java")
    if javap is None or java is None:
        check("static linkage", False, "javap/java not found: install a JDK 17")
        return
    with zipfile.ZipFile(jar) as z:
        classes = [n[:-6].replace("/", ".") for n in z.namelist() if n.endswith(".class")]
    out = subprocess.run([javap, "-c", "-p", "-cp", str(jar), *classes], capture_output=True, text=True,
                         check=True).stdout
    refs = set()
    for kind, owner, name, desc in _REF.findall(out):
        if owner.startswith(_CHECKED):
            refs.add(f"{kind} {owner} {name.strip(chr(34))} {desc}")
    listing = workdir / "refs.txt"
    listing.write_text("\n".join(sorted(refs)) + "\n")
    source = workdir / "LinkCheck.java"
    source.write_text(textwrap.dedent(_LINK_CHECKER))
    run = subprocess.run([java, "-cp", f"{jars_dir}/*", str(source), str(listing)], capture_output=True,
                         text=True)
    missing = [line for line in run.stdout.splitlines() if line.startswith("MISSING")]
    check("static linkage", run.returncode == 0 and not missing,
          f"{len(refs)} referenced Spark/Scala/library members all exist in {jars_dir}" if run.returncode == 0
          else "\n  " + "\n  ".join(missing or [run.stderr.strip()[-2000:]]))


# ---------------------------------------------------------------- 2 and 3. a real session


def tick_summary(t: float, live: int) -> str:
    """A tick summary as the UI publisher posts it ($defs/tick in the tab's schema)."""
    return json.dumps({
        "point": {"t": t, "live": live, "target": live, "input_rate": 10.0, "processed_rate": 9.5,
                  "arrival_rate": 10.0, "backlog": 12.0, "utilization": 0.8},
        "decision": {"action": "none", "count": 1, "first_time": t, "time": t, "executors": live,
                     "reason": "within the band"},
        "status": {"mode": "autoscale", "pending_executors": 0, "provisioning_time_s": 5.5},
        "queries": [{"name": "verify-query", "id": "q-1", "backlog": 12.0, "input_rate": 10.0,
                     "processed_rate": 9.5, "arrival_rate": 10.0, "utilization": 0.8, "required_slots": 1.6}],
        "config": {"interval_s": 10, "min_executors": 1, "max_executors": 3, "utilization_max": 1.0,
                   "utilization_target": 0.7},
    })


def http_get(url: str) -> tuple[int, str]:
    curl = shutil.which("curl")
    if curl:
        run = subprocess.run([curl, "-s", "-L", "-o", "-", "-w", "\n%{http_code}", url], capture_output=True,
                             text=True, timeout=60)
        body, _, code = run.stdout.rpartition("\n")
        return int(code or 0), body
    with urllib.request.urlopen(url, timeout=60) as response:  # pragma: no cover - curl is usual
        return response.status, response.read().decode("utf-8", "replace")


def live_executors(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in snapshot.get("executors", {}).items() if v.get("removedMs") is None}


def session_checks(jar: Path, ui_port: int, workdir: Path) -> None:
    from pyspark.sql import SparkSession

    event_dir = workdir / "eventlog"
    event_dir.mkdir()
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("sparkscale-verify-spark-line")
        .config("spark.jars", str(jar))
        .config("spark.plugins", PLUGIN)
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", str(event_dir))
        .config("spark.eventLog.rolling.enabled", "false")
        .config("spark.eventLog.compress", "false")
        .config("spark.ui.enabled", "true")
        .config("spark.ui.port", str(ui_port))
        .config("spark.port.maxRetries", "0")  # fail rather than quietly serve on another port
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.decommission.enabled", "true")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    sc = spark.sparkContext
    jvm = sc._jvm
    bridge = jvm.io.sparkscale.bridge.SparkscaleBridge
    try:
        print(f"      Spark {spark.version}, driver UI {sc.uiWebUrl}", flush=True)
        check("plugin installed (SparkscaleBridge.isInstalled)", bool(bridge.isInstalled()))
        running = bridge_jars.running_versions(jvm)
        picked = bridge_jars.bridge_jar(jvm)
        check("bridge_jars.running_versions / bridge_jar(jvm) agree with the jar in use",
              picked.name == jar.name,
              f"JVM reports Spark {running[0]} / Scala {running[1]} -> {picked.name}")

        total = spark.range(0, 200_000, numPartitions=4).selectExpr("sum(id) AS s").collect()[0]["s"]
        squares = sc.parallelize(range(1000), 4).map(lambda x: x * x).sum()
        check("small job ran", total == sum(range(200_000)) and squares == sum(x * x for x in range(1000)))

        def snapshot() -> dict[str, Any]:
            return json.loads(bridge.snapshotJson())

        snap = wait_for(snapshot, lambda s: len(live_executors(s)) == 2
                        and s.get("totals", {}).get("tasksFinished", 0) >= 8, 60)
        check("snapshotJson has both executors and the job's tasks",
              len(live_executors(snap)) == 2 and snap["totals"]["tasksFinished"] >= 8
              and snap.get("appId") == sc.applicationId,
              f"executors {sorted(snap.get('executors', {}))}, "
              f"tasksFinished {snap['totals']['tasksFinished']}")

        bridge.postScalingEvent("scale_up", 1, 2, "verify: scale up 1 -> 2 <script>", True, "autoscale",
                                '{"query": "verify", "utilization": 1.5, "ratio": NaN}')
        bridge.postAutoscalerEvent("notice", "info", "verify: a notice", '{"note": "hello"}')
        bridge.publishGauges('{"utilization": 0.5, "backlog.verify": 12.0}', "[]", "")
        check("UI tab attached", bool(bridge.uiTabAttached()))
        now = time.time()
        bridge.postTickEvent(tick_summary(now - 10, 1), True)  # kept by the event log
        bridge.postTickEvent(tick_summary(now, 2), False)  # the live tab's only
        url = f"http://127.0.0.1:{ui_port}/autoscaler/"

        def page() -> tuple[int, str]:
            return http_get(url)

        code, body = wait_for(page, lambda r: '"ticks":2' in r[1], 30)
        check(f"GET {url} serves the Autoscaler page with the document built from both ticks",
              code == 200 and 'id="sparkscale-page"' in body and "verify-query" in body
              and "verify: scale up 1 -\\u003e 2 \\u003cscript\\u003e" in body and "2 <script>" not in body
              and "/static/d3.min.js" in body and '"ticks":2' in body and "<html" in body.lower(),
              f"HTTP {code}, {len(body)} bytes")
        code_d3, _ = http_get(f"http://127.0.0.1:{ui_port}/static/d3.min.js")
        check("Spark serves the d3 the page loads", code_d3 == 200, f"HTTP {code_d3}")
        code_root, body_root = http_get(f"http://127.0.0.1:{ui_port}/jobs/")
        check("the Jobs page lists the Autoscaler tab", code_root == 200 and "Autoscaler" in body_root,
              f"HTTP {code_root}")

        ids = sorted(live_executors(snap), key=int)
        check("requestTotalExecutors(2)", bool(bridge.requestTotalExecutors(2)))
        array = sc._gateway.new_array(jvm.java.lang.String, 1)
        array[0] = ids[0]
        decommissioned = list(bridge.decommissionExecutors(array))
        check("decommissionExecutors([first])", decommissioned == [ids[0]], f"{decommissioned}")
        array[0] = ids[1]
        killed = list(bridge.killExecutors(array))
        check("killExecutors([second])", killed == [ids[1]], f"{killed}")
        snap = wait_for(snapshot, lambda s: s["executors"].get(ids[1], {}).get("removedMs") is not None, 60)
        check("the killed executor is reported removed",
              snap["executors"].get(ids[1], {}).get("removedMs") is not None,
              f"reason {snap['executors'].get(ids[1], {}).get('removedReason')!r}")
    finally:
        spark.stop()

    logs = [p for p in event_dir.iterdir() if p.is_file()]
    events = []
    for log in logs:
        events += [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    scaling = [e for e in events if e.get("Event") == "io.sparkscale.bridge.ScalingEvent"]
    other = [e for e in events if e.get("Event") == "io.sparkscale.bridge.AutoscalerEvent"]
    ok = (len(scaling) == 1 and scaling[0].get("action") == "scale_up"
          and scaling[0].get("fromExecutors") == 1 and scaling[0].get("toExecutors") == 2
          and scaling[0].get("applied") is True
          and scaling[0].get("details", {}).get("utilization") == 1.5
          and scaling[0].get("details", {}).get("ratio") == "NaN" and scaling[0].get("timestampMs", 0) > 0)
    check("ScalingEvent in the event log", ok, json.dumps(scaling[0] if scaling else None)[:300])
    ticks = [e for e in events if e.get("Event") == "io.sparkscale.bridge.AutoscalerTick"]
    check("only the AutoscalerTick to keep in the event log (logEvent false for the live-only one)",
          len(ticks) == 1 and ticks[0].get("point", {}).get("live") == 1 and "liveOnly" not in ticks[0],
          json.dumps(ticks)[:300])
    check("AutoscalerEvent in the event log",
          len(other) == 1 and other[0].get("details") == {"note": "hello"},
          json.dumps(other[0] if other else None)[:300])
    if scaling:
        line = json.dumps(scaling[0])
        event = jvm.org.apache.spark.util.JsonProtocol.sparkEventFromJson(line)
        check("JsonProtocol reads the ScalingEvent back (history server path)",
              event.getClass().getName() == "io.sparkscale.bridge.ScalingEvent"
              and event.action() == "scale_up" and event.toExecutors() == 2, str(event.toString()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jar", type=Path, help="the bridge jar (default: the one bridge_jars picks)")
    parser.add_argument("--ui-port", type=int, default=0, help="driver UI port (default: a free one)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    import pyspark

    installed = bridge_jars.installed_versions()
    print(f"pyspark {pyspark.__version__} ({Path(pyspark.__file__).parent}), SPARK_HOME="
          f"{os.environ.get('SPARK_HOME', '')}; installed Spark {installed[0]} / Scala {installed[1]}",
          flush=True)
    jar = args.jar.resolve() if args.jar else bridge_jars.bridge_jar()
    print(f"jar: {jar}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="sparkscale-verify-"))
    try:
        static_linkage(jar, spark_jars_dir(), workdir)
        session_checks(jar, args.ui_port or free_port(), workdir)
    finally:
        if args.keep_logs:
            print(f"kept {workdir}")
        else:
            with contextlib.suppress(OSError):
                shutil.rmtree(workdir)
    failed = [name for name, ok, _ in results if not ok]
    print(f"\n{len(results) - len(failed)}/{len(results)} checks passed"
          + (f"; FAILED: {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
