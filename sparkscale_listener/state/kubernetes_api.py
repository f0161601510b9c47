"""The Kubernetes API server, as the driver reaches it, for the Kubernetes state store: where it is
and which credentials to show (:func:`resolve_api_access`, as Spark's own driver finds them), and
reading and writing one ConfigMap (:class:`ConfigMapClient`, standard library only: no client
package to install on the driver)."""

from __future__ import annotations

import http.client
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

# What Kubernetes mounts into every pod that runs under a service account.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# Spark's default for spark.kubernetes.driver.master (cluster mode): the API server's in-cluster name.
IN_CLUSTER_MASTER = "https://kubernetes.default.svc"
# What spark-submit leaves of a token given in the conf when it runs the driver in a pod.
REDACTED = "<present_but_redacted>"
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ApiAccess:
    """Where the API server is and how the driver proves who it is."""

    url: str | None  # None: no API server is known, ``missing`` says why
    token: str | None = None  # a token given in Spark's conf
    token_file: str | None = None  # read at the first request and again after a 401: tokens rotate
    ca_file: str | None = None  # None: the system's trusted certificate authorities
    missing: str = ""


def api_url(master: str) -> str:
    """``k8s://host:443`` -> ``https://host:443``: a master URL as the API server's URL (no scheme
    means https, as spark-submit reads it)."""
    url = master.strip()
    if url.startswith("k8s://"):
        url = url[len("k8s://"):]
    if "://" not in url:
        url = "https://" + url
    return url.rstrip("/")


def _in_cluster_url(environ: Mapping[str, str]) -> str | None:
    host = environ.get("KUBERNETES_SERVICE_HOST", "").strip()
    if not host:
        return None
    if ":" in host and not host.startswith("["):  # an IPv6 address
        host = f"[{host}]"
    return f"https://{host}:{environ.get('KUBERNETES_SERVICE_PORT', '443').strip()}"


def resolve_api_access(spark_conf: Mapping[str, str], environ: Mapping[str, str] = os.environ,
                       service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> ApiAccess:
    """The API server and credentials Spark's driver itself uses (``KubernetesClusterManager``).

    In cluster mode (``spark.kubernetes.submitInDriver=true``, set by spark-submit for a driver
    pod): ``spark.kubernetes.driver.master`` and the ``spark.kubernetes.authenticate.driver.mounted.*``
    credentials (spark-submit mounts ``...driver.oauthTokenFile`` and ``...driver.caCertFile`` there).
    In client mode: ``spark.master`` when it is ``k8s://...``, else the pod's in-cluster address, and
    ``spark.kubernetes.authenticate.*``. Of the credentials, ``oauthTokenFile`` comes before
    ``oauthToken``; without either, and without ``caCertFile``, the pod's service account's."""
    if spark_conf.get("spark.kubernetes.submitInDriver", "").strip().lower() == "true":
        url: str | None = spark_conf.get("spark.kubernetes.driver.master") or IN_CLUSTER_MASTER
        prefix = "spark.kubernetes.authenticate.driver.mounted."
    else:
        master = spark_conf.get("spark.master", "").strip()
        url = master if master.startswith("k8s://") else _in_cluster_url(environ)
        prefix = "spark.kubernetes.authenticate."
    if url is None:
        return ApiAccess(None, missing="no Kubernetes API server is known (spark.master is not "
                                       "k8s://... and KUBERNETES_SERVICE_HOST is not set: the driver runs "
                                       "outside a pod)")
    token_file = spark_conf.get(prefix + "oauthTokenFile") or None
    token = spark_conf.get(prefix + "oauthToken") or None
    if token == REDACTED:
        token = None
    if token_file is None and token is None and (service_account_dir / "token").is_file():
        token_file = str(service_account_dir / "token")
    ca_file = spark_conf.get(prefix + "caCertFile") or None
    if ca_file is None and (service_account_dir / "ca.crt").is_file():
        ca_file = str(service_account_dir / "ca.crt")
    return ApiAccess(api_url(url), token=None if token_file else token, token_file=token_file,
                     ca_file=ca_file)


def resolve_namespace(spark_conf: Mapping[str, str], service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> str:
    """``spark.kubernetes.namespace``, else the pod's own namespace (its service account's), else
    ``default``."""
    configured = spark_conf.get("spark.kubernetes.namespace", "").strip()
    if configured:
        return configured
    try:
        return (service_account_dir / "namespace").read_text(encoding="utf-8").strip() or "default"
    except OSError:
        return "default"


class KubernetesApiError(Exception):
    """A request to the API server failed: ``status`` is the HTTP status, None when no reply came."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status


def _reply_message(err: urllib.error.HTTPError) -> str:
    """``HTTP 403 Forbidden: configmaps "x" is forbidden: ...``: the status and the server's words."""
    try:
        body = err.read().decode("utf-8", "replace")
    except OSError:
        body = ""
    try:
        said = json.loads(body).get("message", "")
    except (ValueError, AttributeError):
        said = body[:300]
    return f"HTTP {err.code} {err.reason}" + (f": {said}" if said else "")


class ConfigMapClient:
    """Reads, creates and replaces one ConfigMap over the API server's REST API."""

    def __init__(self, api: ApiAccess, namespace: str, name: str,
                 timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        if not api.url:
            raise ValueError("ConfigMapClient needs the API server's URL")
        self.api = api
        self.timeout_s = timeout_s
        self._collection = f"{api.url}/api/v1/namespaces/{quote(namespace, safe='')}/configmaps"
        self._item = f"{self._collection}/{quote(name, safe='')}"
        self._token = api.token
        self._tls: ssl.SSLContext | None = None

    def read(self) -> dict[str, Any] | None:
        """The ConfigMap, or None when it does not exist."""
        try:
            return self._request("GET", self._item)
        except KubernetesApiError as err:
            if err.status == 404:
                return None
            raise

    def create(self, configmap: dict[str, Any]) -> dict[str, Any]:
        """POST: 409 when it exists already."""
        return self._request("POST", self._collection, configmap)

    def replace(self, configmap: dict[str, Any]) -> dict[str, Any]:
        """PUT: 409 when its ``metadata.resourceVersion`` is no longer the server's."""
        return self._request("PUT", self._item, configmap)

    def _request(self, method: str, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return self._send(method, url, body)
        except KubernetesApiError as err:
            # A service account's token is rotated (a bound token lives an hour): read the file again.
            if err.status != 401 or self.api.token_file is None:
                raise
            self._token = None
            return self._send(method, url, body)

    def _send(self, method: str, url: str, body: dict[str, Any] | None) -> dict[str, Any]:
        headers = {"Accept": "application/json"}
        token = self._bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        tls = self._tls_context()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=tls) as reply:
                answer = json.loads(reply.read())
        except urllib.error.HTTPError as err:
            raise KubernetesApiError(err.code, _reply_message(err)) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:  # refused, timed out...
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            raise KubernetesApiError(None, f"no reply from {self.api.url}: {reason}") from None
        except ValueError as err:
            raise KubernetesApiError(None, f"the reply of {self.api.url} is not JSON: {err}") from None
        if not isinstance(answer, dict):
            raise KubernetesApiError(None, f"the reply of {self.api.url} is not an object")
        return answer

    def _bearer_token(self) -> str | None:
        if self._token is None and self.api.token_file is not None:
            try:
                self._token = Path(self.api.token_file).read_text(encoding="utf-8").strip()
            except OSError as err:
                raise KubernetesApiError(None, f"the token file {self.api.token_file} cannot be read: "
                                               f"{err}") from None
        return self._token

    def _tls_context(self) -> ssl.SSLContext | None:
        assert self.api.url is not None
        if not self.api.url.startswith("https://"):
            return None
        if self._tls is None:
            try:
                self._tls = ssl.create_default_context(cafile=self.api.ca_file)
            except OSError as err:  # ssl.SSLError is one too
                raise KubernetesApiError(None, f"the CA certificate {self.api.ca_file} cannot be used: "
                                               f"{err}") from None
        return self._tls
