"""The Kubernetes state store against a real API server: the tests' loopback one (fabric8's server
in CRUD mode, its own JVM, one per module and worker). A driver restart is a second store opened on
the same ConfigMap; a concurrent writer is a request made between the store's read and its write.

What that server never answers (401 for an expired token, 403 for missing RBAC) comes from a small
HTTP server of the test's own that answers those statuses the way the API server does.
"""

from __future__ import annotations

import http.server
import itertools
import json
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_cluster import ApiServer
from store_contract import StateStoreContract

from sparkscale_listener.state.autoscaler_state import AutoscalerState
from sparkscale_listener.state.kubernetes_api import ApiAccess, KubernetesApiError
from sparkscale_listener.state.kubernetes_store import KubernetesStateStore, data_size
from sparkscale_listener.state.store import APP_SCOPE

NAMESPACE = "streaming"
_names = itertools.count()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with ApiServer(tmp_path_factory.mktemp("apiserver")).start() as started:
        yield started


@pytest.fixture
def configmap() -> str:
    """A ConfigMap name of the test's own (the server is shared by the module's tests)."""
    return f"sparkscale-test-{next(_names)}"


def configmap_path(name: str) -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/configmaps/{name}"


def open_store(server: ApiServer, name: str, **kwargs: Any) -> KubernetesStateStore:
    return KubernetesStateStore(ApiAccess(server.url), NAMESPACE, name, **kwargs)


class TestKubernetesStore(StateStoreContract):
    @pytest.fixture
    def store(self, server: ApiServer, configmap: str) -> Iterator[KubernetesStateStore]:
        s = open_store(server, configmap, max_records=5)
        yield s
        s.close()


def test_a_restarted_driver_reads_everything_the_old_one_committed(server: ApiServer, configmap: str) -> None:
    old = open_store(server, configmap)
    old.put("orders-job", APP_SCOPE, "guard", {"healthy_target": 6, "paused_until": 1700000000.5})
    old.put("orders-job", "clicks", "blocked", True)
    old.append("orders-job", APP_SCOPE, "scaling", {"from": 2, "to": 6})
    old.append("orders-job", APP_SCOPE, "provisioning", {"seconds": 41.5})
    old.commit()
    old.close()  # the driver pod dies

    restarted = open_store(server, configmap)
    assert restarted.get("orders-job", APP_SCOPE, "guard") == {"healthy_target": 6,
                                                               "paused_until": 1700000000.5}
    assert restarted.get("orders-job", "clicks", "blocked") is True
    assert restarted.records("orders-job", APP_SCOPE, "scaling") == [{"from": 2, "to": 6}]
    assert restarted.records("orders-job", APP_SCOPE, "provisioning") == [{"seconds": 41.5}]
    assert restarted.fell_back is None
    stored = server.request("GET", configmap_path(configmap))
    assert stored["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "sparkscale"}
    assert sorted(stored["data"]) == ["format", "history.orders-job._5fapp.provisioning",
                                      "history.orders-job._5fapp.scaling", "value.orders-job._5fapp.guard",
                                      "value.orders-job.clicks.blocked"]


def test_the_configmap_is_written_once_per_commit_and_only_when_something_changed(
        server: ApiServer, configmap: str) -> None:
    store = open_store(server, configmap)
    store.put("app", APP_SCOPE, "a", 1)
    store.put("app", APP_SCOPE, "b", 2)
    store.append("app", APP_SCOPE, "scaling", {"to": 3})
    assert server.request("GET", configmap_path(configmap), none_on=(404,)) is None  # nothing written yet
    store.commit()
    written = server.request("GET", configmap_path(configmap))["metadata"]["resourceVersion"]
    store.commit()  # nothing changed since
    assert server.request("GET", configmap_path(configmap))["metadata"]["resourceVersion"] == written
    store.put("app", APP_SCOPE, "a", 10)
    store.put("app", APP_SCOPE, "a", 11)
    store.commit()
    again = server.request("GET", configmap_path(configmap))
    assert int(again["metadata"]["resourceVersion"]) == int(written) + 1
    assert json.loads(again["data"]["value.app._5fapp.a"])["value"] == 11


def test_a_concurrent_write_between_read_and_write_is_read_again_and_both_are_kept(
        server: ApiServer, configmap: str) -> None:
    ours, theirs = open_store(server, configmap), open_store(server, configmap)
    ours.put("app", APP_SCOPE, "mine", "first")
    ours.commit()
    assert theirs.get("app", APP_SCOPE, "mine") == "first"  # theirs read the ConfigMap now
    ours.append("app", APP_SCOPE, "scaling", {"by": "ours"})
    ours.commit()  # the resourceVersion theirs read is stale from here on
    theirs.put("app", APP_SCOPE, "theirs", 2)
    theirs.put("app", APP_SCOPE, "mine", "overwritten")
    theirs.append("app", APP_SCOPE, "scaling", {"by": "theirs"})
    theirs.commit()  # 409: read again, this tick's changes on top

    assert theirs.records("app", APP_SCOPE, "scaling") == [{"by": "ours"}, {"by": "theirs"}]
    restarted = open_store(server, configmap)
    assert restarted.get("app", APP_SCOPE, "theirs") == 2
    assert restarted.get("app", APP_SCOPE, "mine") == "overwritten"
    assert restarted.records("app", APP_SCOPE, "scaling") == [{"by": "ours"}, {"by": "theirs"}]


def test_a_value_is_read_afresh_so_another_runs_heartbeat_is_seen_to_beat(
        server: ApiServer, configmap: str) -> None:
    ours, theirs = open_store(server, configmap), open_store(server, configmap)
    theirs.put("app", APP_SCOPE, "owner", {"run": "b", "heartbeat": 1.0})
    theirs.commit()
    assert ours.get("app", APP_SCOPE, "owner") == {"run": "b", "heartbeat": 1.0}
    theirs.put("app", APP_SCOPE, "owner", {"run": "b", "heartbeat": 2.0})
    theirs.commit()
    assert ours.get("app", APP_SCOPE, "owner") == {"run": "b", "heartbeat": 2.0}  # not the copy
    ours.put("app", APP_SCOPE, "mine", 1)  # pending: reads are served from the copy until written
    assert ours.get("app", APP_SCOPE, "mine") == 1


def test_a_configmap_created_by_another_writer_first_is_updated_not_replaced(
        server: ApiServer, configmap: str) -> None:
    ours, theirs = open_store(server, configmap), open_store(server, configmap)
    ours.put("app", APP_SCOPE, "mine", 1)
    theirs.put("app", APP_SCOPE, "theirs", 2)  # both read it absent
    theirs.commit()
    ours.commit()  # its create fails (409, it exists now): read, apply, replace
    restarted = open_store(server, configmap)
    assert (restarted.get("app", APP_SCOPE, "mine"), restarted.get("app", APP_SCOPE, "theirs")) == (1, 2)


def test_a_configmap_deleted_under_the_store_is_created_again(server: ApiServer, configmap: str) -> None:
    store = open_store(server, configmap)
    store.put("app", APP_SCOPE, "a", 1)
    store.commit()
    server.request("DELETE", configmap_path(configmap))
    store.put("app", APP_SCOPE, "b", 2)
    store.commit()
    assert open_store(server, configmap).get("app", APP_SCOPE, "b") == 2


def test_a_configmap_kept_under_its_size_drops_the_oldest_history_rows(server: ApiServer,
                                                                       configmap: str) -> None:
    store = open_store(server, configmap, max_bytes=4000)
    store.put("app", APP_SCOPE, "guard", {"healthy_target": 6})
    for i in range(100):
        store.append("app", APP_SCOPE, "scaling", {"i": i, "reason": "utilization 0.93 above 0.85 " * 2})
        if i % 10 == 9:
            store.commit()
    stored = server.request("GET", configmap_path(configmap))["data"]
    assert 3500 < data_size(stored) <= 4000
    rows = open_store(server, configmap).records("app", APP_SCOPE, "scaling", limit=1000)
    assert [row["i"] for row in rows] == list(range(100 - len(rows), 100))  # the newest, in order
    assert rows == store.records("app", APP_SCOPE, "scaling", limit=1000)  # reads show what was kept
    assert open_store(server, configmap).get("app", APP_SCOPE, "guard") == {"healthy_target": 6}


def test_the_control_loops_state_survives_a_driver_restart(server: ApiServer, configmap: str) -> None:
    errors: list[str] = []

    def state(run_id: str) -> AutoscalerState:
        return AutoscalerState(open_store(server, configmap), "orders-job",
                               lambda where, exc: errors.append(f"{where}: {exc}"), run_id=run_id)

    crashed = state("app-1")
    assert crashed.claim(100.0, stale_after_s=30.0) == "owned"
    crashed.store_rollback_state({"healthy_target": 6}, None)
    crashed.record_provisioning(100.0, seconds=42.0, executors=2)
    crashed.flush()  # the end of its tick: one write
    restarted = state("app-2")
    assert restarted.claim(200.0, stale_after_s=30.0) == "owned"  # the old heartbeat is stale
    assert restarted.rollback_guard() == {"healthy_target": 6}
    assert restarted.provisioning_seconds(limit=10) == [42.0]
    assert errors == []


def test_an_unreachable_server_keeps_state_in_memory_and_says_where(configmap: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reports: list[str] = []
    store = KubernetesStateStore(ApiAccess(f"http://127.0.0.1:{port}"), NAMESPACE, configmap,
                                 on_fallback=reports.append)
    assert store.get("app", APP_SCOPE, "k") is None
    store.put("app", APP_SCOPE, "k", 1)
    store.commit()
    assert store.get("app", APP_SCOPE, "k") == 1
    assert reports == [store.fell_back]
    assert store.fell_back is not None
    url = f"http://127.0.0.1:{port}"
    assert store.fell_back.startswith(f"state store ConfigMap {NAMESPACE}/{configmap} at {url} cannot be "
                                      f"read (no reply from {url}: ")
    assert store.fell_back.endswith("; keeping state in memory (it will not survive a restart)")


def test_no_api_server_known_keeps_state_in_memory_and_says_why(configmap: str) -> None:
    unknown = ApiAccess(None, missing="no Kubernetes API server is known (...)")
    store = KubernetesStateStore(unknown, NAMESPACE, configmap)
    store.put("app", APP_SCOPE, "k", 1)
    assert store.get("app", APP_SCOPE, "k") == 1
    assert store.fell_back == (f"state store ConfigMap {NAMESPACE}/{configmap}: no Kubernetes API server is "
                               "known (...); keeping state in memory (it will not survive a restart)")


def test_a_configmap_this_store_did_not_write_is_left_as_it_is(server: ApiServer, configmap: str) -> None:
    theirs = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": configmap, "namespace": NAMESPACE}, "data": {"application.conf": "x = 1"}}
    server.request("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", theirs)
    store = open_store(server, configmap)
    store.put("app", APP_SCOPE, "k", 1)
    store.commit()
    assert store.fell_back == (f"state store ConfigMap {NAMESPACE}/{configmap} cannot be used (it holds keys "
                               "this store does not write (application.conf...) and no 'format' key); it is "
                               "left as it is; keeping state in memory (it will not survive a restart)")
    assert server.request("GET", configmap_path(configmap))["data"] == {"application.conf": "x = 1"}


# -- statuses the loopback server never answers ----------------------------------------------------

Answer = Callable[[str, str, dict[str, str], bytes], tuple[int, Any]]


@pytest.fixture
def answering() -> Iterator[Callable[[Answer], str]]:
    """Starts an HTTP server that answers each request with ``answer(method, path, headers, body)``
    (a status and a JSON body); gives its URL."""
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(answer: Answer) -> str:
        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, reply = answer(self.command, self.path, dict(self.headers), body)
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _answer

            def log_message(self, *args: Any) -> None:
                pass

        served = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=served.serve_forever, daemon=True).start()
        servers.append(served)
        return f"http://127.0.0.1:{served.server_address[1]}"

    yield start
    for served in servers:
        served.shutdown()
        served.server_close()


def status(code: int, message: str) -> tuple[int, dict[str, Any]]:
    """The API server's answer for a failure: a Status object."""
    return code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code}


def stored(body: bytes) -> tuple[int, dict[str, Any]]:
    """The API server's answer to a create: the ConfigMap sent, with its resourceVersion."""
    configmap = json.loads(body)
    return 201, {**configmap, "metadata": {**configmap["metadata"], "resourceVersion": "1"}}


def test_missing_rbac_keeps_state_in_memory_naming_the_verbs_needed(
        answering: Callable[[Answer], str], configmap: str) -> None:
    url = answering(lambda *_: status(403, f'configmaps "{configmap}" is forbidden: User '
                                           f'"system:serviceaccount:{NAMESPACE}:spark" cannot get resource '
                                           '"configmaps"'))
    store = KubernetesStateStore(ApiAccess(url), NAMESPACE, configmap)
    assert store.records("app", APP_SCOPE, "scaling") == []
    assert store.fell_back == (
        f"state store ConfigMap {NAMESPACE}/{configmap} at {url} cannot be read (HTTP 403 Forbidden: "
        f'configmaps "{configmap}" is forbidden: User "system:serviceaccount:{NAMESPACE}:spark" cannot get '
        f'resource "configmaps"); the driver\'s service account needs the verbs get, create and update on '
        f"configmaps in namespace {NAMESPACE}; keeping state in memory (it will not survive a restart)")


def test_a_refused_write_is_reported_and_written_at_the_next_tick(
        answering: Callable[[Answer], str], configmap: str) -> None:
    created: list[dict[str, Any]] = []

    def answer(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if method == "GET":
            return status(404, "not found")
        if not created:  # the first create: RBAC grants get but not create
            created.append({})
            return status(403, 'configmaps is forbidden: cannot create resource "configmaps"')
        created.append(json.loads(body))
        return stored(body)

    url = answering(answer)
    errors: list[tuple[str, BaseException]] = []
    state = AutoscalerState(KubernetesStateStore(ApiAccess(url), NAMESPACE, configmap), "orders-job",
                            lambda where, exc: errors.append((where, exc)))
    state.store_rollback_state({"healthy_target": 6}, None)
    state.flush()
    [(where, error)] = errors
    assert where == "state store" and isinstance(error, KubernetesApiError) and error.status == 403
    assert str(error) == (f"writing state store ConfigMap {NAMESPACE}/{configmap} failed (HTTP 403 "
                          'Forbidden: configmaps is forbidden: cannot create resource "configmaps"); the '
                          "driver's service account needs the verbs get, create and update on configmaps in "
                          f"namespace {NAMESPACE}; the changes are kept and written at the next tick")
    state.flush()  # the next tick, nothing new: the kept changes are written
    assert len(errors) == 1
    assert json.loads(created[1]["data"]["value.orders-job._5fapp.guard"])["value"] == {"healthy_target": 6}


def test_a_rotated_token_is_read_again_after_a_401(answering: Callable[[Answer], str], tmp_path: Path,
                                                   configmap: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    accepted = {"Bearer first"}
    seen: list[str] = []

    def answer(method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        seen.append(headers.get("Authorization", ""))
        if seen[-1] not in accepted:
            return status(401, "Unauthorized")
        if method == "GET":
            return status(404, "not found")
        return stored(body)

    store = KubernetesStateStore(ApiAccess(answering(answer), token_file=str(token_file)), NAMESPACE,
                                 configmap)
    assert store.get("app", APP_SCOPE, "k") is None  # read with the first token
    token_file.write_text("second\n")  # the kubelet rotates it; the old one expires
    accepted = {"Bearer second"}
    store.put("app", APP_SCOPE, "k", 1)
    store.commit()
    assert seen == ["Bearer first", "Bearer first", "Bearer second"] and store.fell_back is None
