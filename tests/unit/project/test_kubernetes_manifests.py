"""The Kubernetes material in docs/kubernetes/ is what the API server and sparkscale accept: each
SparkApplication conforms to its operator's published CRD schema (copies in tests/data/kubernetes/),
its sparkscale settings pass the checks ``autoscale()`` makes before a session starts, and rbac.yaml
grants what Spark's driver and sparkscale's ConfigMap store call."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from crd_schema import crd_schema, resource_errors, unknown_keywords

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.spark.session import refuse_decommission_without_spark, refuse_dynamic_allocation
from sparkscale_listener.state.loading import state_store_choice

DOCS = Path(__file__).resolve().parents[3] / "docs" / "kubernetes"
DOCKERFILE = (DOCS / "Dockerfile").read_text(encoding="utf-8")
# manifest -> (its CRD, the served version it is written for)
MANIFESTS = {
    "apache-spark-operator.yaml": ("sparkapplications.spark.apache.org", "v1"),
    "kubeflow-spark-operator.yaml": ("sparkapplications.sparkoperator.k8s.io", "v1beta2"),
}
SERVICE_ACCOUNT = "sparkscale-driver"


def manifest(name: str) -> dict[str, Any]:
    return yaml.safe_load((DOCS / name).read_text(encoding="utf-8"))


def spark_conf(name: str) -> dict[str, str]:
    """The Spark settings the driver gets from a manifest: its sparkConf, and for the Kubeflow
    operator the fields it turns into settings (the image, the driver's service account)."""
    spec = manifest(name)["spec"]
    conf = dict(spec["sparkConf"])
    if "image" in spec:
        conf["spark.kubernetes.container.image"] = spec["image"]
    if "serviceAccount" in spec.get("driver", {}):
        conf["spark.kubernetes.authenticate.driver.serviceAccountName"] = spec["driver"]["serviceAccount"]
    return conf


def base_image_spark_version() -> str:
    found = re.search(r"^ARG SPARK_IMAGE=apache/spark:(\d+\.\d+\.\d+)-scala2\.13-java17-python3-ubuntu$",
                      DOCKERFILE, re.MULTILINE)
    assert found, "the Dockerfile names its base image in ARG SPARK_IMAGE"
    return found.group(1)


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_conforms_to_its_operators_crd_schema(name: str) -> None:
    crd, version = MANIFESTS[name]
    assert resource_errors(manifest(name), crd, version) == []


@pytest.mark.parametrize("name", MANIFESTS)
def test_the_checker_refuses_a_wrong_field_type_or_value(name: str) -> None:
    crd, version = MANIFESTS[name]
    good = manifest(name)
    unknown = copy.deepcopy(good)
    unknown["spec"]["sparkConfig"] = unknown["spec"].pop("sparkConf")  # a misspelt field
    not_text = copy.deepcopy(good)
    not_text["spec"]["sparkConf"]["spark.executor.instances"] = 2  # sparkConf values are strings
    other_version = copy.deepcopy(good)
    other_version["apiVersion"] = good["apiVersion"].rsplit("/", 1)[0] + "/v0"
    assert any("'sparkConfig' is not declared" in e for e in resource_errors(unknown, crd, version))
    assert any("is not of type string" in e for e in resource_errors(not_text, crd, version))
    assert any("/v0' is not" in e for e in resource_errors(other_version, crd, version))


def test_the_kubeflow_schema_refuses_what_its_fields_forbid() -> None:
    crd, version = MANIFESTS["kubeflow-spark-operator.yaml"]
    broken = manifest("kubeflow-spark-operator.yaml")
    broken["spec"]["mode"] = "standalone"  # an enum: cluster or client
    broken["spec"]["executor"]["instances"] = 0  # minimum 1
    del broken["spec"]["mainApplicationFile"]  # required
    errors = resource_errors(broken, crd, version)
    assert any("'standalone' is not one of" in e for e in errors)
    assert any("executor.instances: 0 is below 1" in e for e in errors)
    assert any("'mainApplicationFile' is missing" in e for e in errors)


@pytest.mark.parametrize("crd_version", MANIFESTS.values())
def test_the_checker_understands_every_keyword_of_the_saved_schemas(crd_version: tuple[str, str]) -> None:
    assert unknown_keywords(crd_schema(*crd_version)) == set()


@pytest.mark.parametrize("name", MANIFESTS)
def test_the_sparkscale_settings_pass_the_checks_autoscale_makes_before_starting(name: str) -> None:
    conf = spark_conf(name)
    config = AutoscalerConfig.from_spark_conf(conf)  # every spark.sparkscale.* key exists and parses
    refuse_dynamic_allocation(conf)
    refuse_decommission_without_spark(config, conf)
    assert config.enabled and config.decommission and config.state_store == "kubernetes"
    assert (config.min_executors, config.max_executors) == (1, 20)


def test_the_manifests_state_store_is_a_known_store() -> None:
    config = AutoscalerConfig.from_spark_conf(spark_conf("apache-spark-operator.yaml"))
    assert state_store_choice(config)[0] == "kubernetes"


@pytest.mark.parametrize("name", MANIFESTS)
def test_each_manifest_runs_the_image_and_account_the_other_files_make(name: str) -> None:
    conf = spark_conf(name)
    version = base_image_spark_version()
    spec = manifest(name)["spec"]
    assert spec.get("sparkVersion", spec.get("runtimeVersions", {}).get("sparkVersion")) == version
    assert conf["spark.kubernetes.container.image"].endswith(f":{version}")
    assert conf["spark.kubernetes.authenticate.driver.serviceAccountName"] == SERVICE_ACCOUNT
    in_image = spec.get("mainApplicationFile", spec.get("pyFiles")).removeprefix("local://")
    assert f"COPY --chown=spark:spark docs/kubernetes/app.py {in_image}\n" in DOCKERFILE
    for key in ("spark.decommission.enabled", "spark.storage.decommission.enabled",
                "spark.storage.decommission.shuffleBlocks.enabled",
                "spark.storage.decommission.rddBlocks.enabled"):
        assert conf[key] == "true", key
    assert int(conf["spark.kubernetes.allocation.batch.size"]) >= 1


def test_the_role_grants_what_the_driver_and_the_configmap_store_call() -> None:
    documents = list(yaml.safe_load_all((DOCS / "rbac.yaml").read_text(encoding="utf-8")))
    by_kind = {d["kind"]: d for d in documents}
    assert by_kind["ServiceAccount"]["metadata"]["name"] == SERVICE_ACCOUNT
    role, binding = by_kind["Role"], by_kind["RoleBinding"]
    verbs: dict[str, set[str]] = {}
    for rule in role["rules"]:
        assert rule["apiGroups"] == [""]  # pods, services, config maps and claims are core resources
        for resource in rule["resources"]:
            verbs.setdefault(resource, set()).update(rule["verbs"])
    assert {"get", "create", "update"} <= verbs["configmaps"]
    assert {"create", "delete", "list", "watch"} <= verbs["pods"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT,
                                    "namespace": by_kind["ServiceAccount"]["metadata"]["namespace"]}]
    namespaces = {d["metadata"]["namespace"] for d in documents}
    namespaces |= {manifest(name)["metadata"]["namespace"] for name in MANIFESTS}
    assert len(namespaces) == 1, namespaces
