"""Where the Kubernetes state store finds the API server and its credentials: from Spark's conf, the
pod's environment and its service account's files (a directory of the test's here), as Spark's
driver finds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkscale_listener.state.kubernetes_api import (
    IN_CLUSTER_MASTER,
    ApiAccess,
    api_url,
    resolve_api_access,
    resolve_namespace,
)

CLUSTER_MODE = {"spark.kubernetes.submitInDriver": "true", "spark.master": "k8s://https://203.0.113.7:6443"}
IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


@pytest.fixture
def service_account(tmp_path: Path) -> Path:
    """What Kubernetes mounts into a pod that runs under a service account."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("account-token\n")
    (account / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    (account / "namespace").write_text("streaming\n")
    return account


@pytest.mark.parametrize(("master", "url"), [
    ("k8s://https://api.example.com:6443", "https://api.example.com:6443"),
    ("k8s://api.example.com:6443", "https://api.example.com:6443"),  # no scheme: https
    ("k8s://http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
    ("https://kubernetes.default.svc", "https://kubernetes.default.svc"),
])
def test_a_master_url_becomes_the_api_servers(master: str, url: str) -> None:
    assert api_url(master) == url


def test_a_driver_pod_uses_the_driver_master_and_the_credentials_spark_submit_mounted(
        service_account: Path) -> None:
    conf = {**CLUSTER_MODE, "spark.kubernetes.driver.master": "https://kubernetes.default.svc:443",
            "spark.kubernetes.authenticate.driver.mounted.oauthTokenFile": "/mnt/secrets/token",
            "spark.kubernetes.authenticate.driver.mounted.caCertFile": "/mnt/secrets/ca.crt",
            # what spark-submit leaves of the submitter's own: neither is the driver's to use
            "spark.kubernetes.authenticate.driver.oauthToken": "<present_but_redacted>",
            "spark.kubernetes.authenticate.driver.caCertFile": "/home/me/ca.crt"}
    assert resolve_api_access(conf, IN_POD, service_account) == ApiAccess(
        "https://kubernetes.default.svc:443", token_file="/mnt/secrets/token", ca_file="/mnt/secrets/ca.crt")


def test_a_driver_pod_without_mounted_credentials_uses_its_service_account(service_account: Path) -> None:
    assert resolve_api_access(CLUSTER_MODE, IN_POD, service_account) == ApiAccess(
        IN_CLUSTER_MASTER, token_file=str(service_account / "token"), ca_file=str(service_account / "ca.crt"))


def test_a_client_mode_driver_uses_the_k8s_master_and_the_client_mode_credentials(tmp_path: Path) -> None:
    conf = {"spark.master": "k8s://api.example.com:6443",
            "spark.kubernetes.driver.master": "https://ignored.in.client.mode",
            "spark.kubernetes.authenticate.oauthToken": "client-token",
            "spark.kubernetes.authenticate.caCertFile": "/etc/ca.crt"}
    assert resolve_api_access(conf, {}, tmp_path / "no-account") == ApiAccess(
        "https://api.example.com:6443", token="client-token", ca_file="/etc/ca.crt")


def test_a_token_file_comes_before_a_token_value(tmp_path: Path) -> None:
    conf = {"spark.master": "k8s://https://h:1", "spark.kubernetes.authenticate.oauthToken": "value",
            "spark.kubernetes.authenticate.oauthTokenFile": "/var/token"}
    access = resolve_api_access(conf, {}, tmp_path)
    assert (access.token, access.token_file) == (None, "/var/token")


@pytest.mark.parametrize(("environ", "url"), [
    (IN_POD, "https://10.96.0.1:443"),
    ({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "6443"}, "https://[fd00::1]:6443"),
])
def test_a_driver_in_a_pod_without_a_k8s_master_uses_the_in_cluster_address(
        environ: dict[str, str], url: str, service_account: Path) -> None:
    access = resolve_api_access({"spark.master": "local[*]"}, environ, service_account)
    assert access.url == url and access.token_file == str(service_account / "token")


def test_with_no_api_server_known_the_access_says_why(tmp_path: Path) -> None:
    access = resolve_api_access({"spark.master": "spark://m:7077"}, {}, tmp_path)
    assert access.url is None
    assert access.missing == ("no Kubernetes API server is known (spark.master is not k8s://... and "
                              "KUBERNETES_SERVICE_HOST is not set: the driver runs outside a pod)")


def test_the_namespace_is_sparks_else_the_pods_else_default(service_account: Path, tmp_path: Path) -> None:
    assert resolve_namespace({"spark.kubernetes.namespace": "team-a"}, service_account) == "team-a"
    assert resolve_namespace({}, service_account) == "streaming"
    assert resolve_namespace({}, tmp_path / "no-account") == "default"
