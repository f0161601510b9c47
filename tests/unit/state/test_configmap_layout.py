"""The Kubernetes state store's ConfigMap, without a server: its name, its data keys, its layout, its
size limit, and the keys that configure it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.config.options import ConfigError
from sparkscale_listener.state.kubernetes_store import (
    MAX_NAME_LENGTH,
    ConfigMapData,
    KubernetesStateStore,
    UnusableConfigMap,
    configmap_name,
    data_key,
    data_size,
)
from sparkscale_listener.state.loading import build_state_store, state_store_choice
from sparkscale_listener.state.store import APP_SCOPE

DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")


# -- the ConfigMap's name ------------------------------------------------------------------------

@pytest.mark.parametrize(("app", "name"), [
    ("orders-job", "sparkscale-orders-job"),
    ("Orders Job", "sparkscale-orders-job"),
    ("  clicks__per.minute!  ", "sparkscale-clicks-per-minute"),
    ("Überstunden 2024", "sparkscale-berstunden-2024"),
    ("!!!", "sparkscale"),
    ("", "sparkscale"),
])
def test_the_configmap_is_named_after_the_application(app: str, name: str) -> None:
    assert configmap_name(app) == name


def test_a_long_application_name_is_cut_with_a_digest_that_keeps_it_apart() -> None:
    first, second = configmap_name("a" * 300 + "1"), configmap_name("a" * 300 + "2")
    assert first != second
    for name in (first, second):
        assert len(name) <= MAX_NAME_LENGTH and DNS_SUBDOMAIN.fullmatch(name), name


# -- data keys ------------------------------------------------------------------------------------

def test_a_data_key_reads_as_what_it_holds() -> None:
    assert data_key("value", ("orders-job", APP_SCOPE, "policy")) == "value.orders-job._5fapp.policy"
    assert data_key("history", ("Orders Job", "q.1", "scaling")) == "history.Orders_20Job.q_2e1.scaling"


def test_distinct_names_never_share_a_key_and_every_key_is_one_kubernetes_accepts() -> None:
    tricky = ["a.b", "a_2eb", "a_b", "a b", "a", "", "_", ".", "ü", "日本", "a/b", "a\ud800b"]
    identities = [(app, scope, key) for app in tricky for scope in tricky[:4] for key in ("k", "k.k")]
    keys = [data_key("value", identity) for identity in identities]
    assert len(set(keys)) == len(identities)
    assert all(CONFIGMAP_KEY.fullmatch(key) and len(key) <= MAX_NAME_LENGTH for key in keys)


def test_a_key_too_long_for_kubernetes_is_the_kind_and_a_digest() -> None:
    long_app = "streaming " * 40
    key = data_key("value", (long_app, APP_SCOPE, "policy"))
    assert re.fullmatch(r"value\.[0-9a-f]{64}", key)
    assert key != data_key("value", (long_app, APP_SCOPE, "guard"))


# -- the layout -----------------------------------------------------------------------------------

def _content(max_records: int = 1000) -> ConfigMapData:
    content = ConfigMapData(max_records)
    content.put(("orders-job", APP_SCOPE, "policy"), json.dumps({"pending": None}))
    content.append(("orders-job", APP_SCOPE, "scaling"), json.dumps({"to": 3}))
    content.append(("orders-job", APP_SCOPE, "scaling"), json.dumps({"to": 5}))
    return content


def test_the_data_names_what_each_entry_holds_and_reads_back_the_same() -> None:
    data = _content().to_data()
    assert data == {
        "format": "1",
        "value.orders-job._5fapp.policy":
            '{"app":"orders-job","scope":"_app","key":"policy","value":{"pending": null}}',
        "history.orders-job._5fapp.scaling":
            '{"app":"orders-job","scope":"_app","kind":"scaling","rows":[{"to": 3},{"to": 5}]}',
    }
    again = ConfigMapData.parse(data, 1000)
    assert again.values == {("orders-job", APP_SCOPE, "policy"): '{"pending":null}'}
    assert again.histories == {("orders-job", APP_SCOPE, "scaling"): ['{"to":3}', '{"to":5}']}


def test_reading_keeps_the_newest_max_records_rows() -> None:
    assert ConfigMapData.parse(_content().to_data(), max_records=1).histories == {
        ("orders-job", APP_SCOPE, "scaling"): ['{"to":5}']}


def test_an_empty_configmap_is_an_empty_store() -> None:
    assert not ConfigMapData.parse(None, 10) and not ConfigMapData.parse({}, 10)


@pytest.mark.parametrize(("data", "problem"), [
    ({"log4j.properties": "x"}, "keys this store does not write (log4j.properties...) and no 'format' key"),
    ({"format": "2"}, "its format '2' is not this sparkscale's (1)"),
    ({"format": "1", "value.a.b.c": "{not json"}, "its entry 'value.a.b.c' cannot be read (JSONDecodeError"),
    ({"format": "1", "value.a.b.c": '{"app": "a", "scope": "b"}'},
     "its entry 'value.a.b.c' cannot be read (KeyError"),
    ({"format": "1", "history.a.b.c": '{"app": "a", "scope": "b", "kind": "c", "rows": [1]}'},
     "records must be dicts"),
    ({"format": "1", "other.a.b.c": "{}"}, "not a value or a history of this store"),
])
def test_data_this_store_did_not_write_is_refused_saying_what_is_wrong(data: dict[str, str],
                                                                      problem: str) -> None:
    with pytest.raises(UnusableConfigMap) as refused:
        ConfigMapData.parse(data, 10)
    assert problem in str(refused.value)


# -- the size limit -------------------------------------------------------------------------------

def test_the_oldest_rows_of_the_largest_history_go_first_until_the_data_fits() -> None:
    content = ConfigMapData(1000)
    content.put(("app", APP_SCOPE, "policy"), json.dumps({"big": "v" * 200}))
    for i in range(40):
        content.append(("app", APP_SCOPE, "scaling"), json.dumps({"i": i, "reason": "r" * 50}))
    for i in range(5):
        content.append(("app", APP_SCOPE, "provisioning"), json.dumps({"i": i}))
    full = data_size(content.to_data())
    limit = full - 1500

    data, dropped = content.fitted(limit)

    assert data_size(data) <= limit < data_size(data) + 80  # no more dropped than needed
    assert dropped == len(range(40)) - len(content.histories[("app", APP_SCOPE, "scaling")])
    assert [json.loads(r)["i"] for r in content.histories[("app", APP_SCOPE, "scaling")]] == list(
        range(dropped, 40))  # the newest kept
    assert len(content.histories[("app", APP_SCOPE, "provisioning")]) == 5  # the small history untouched
    assert data == content.to_data()  # what is written is what is read


def test_a_history_emptied_to_fit_disappears_and_values_are_never_dropped() -> None:
    content = ConfigMapData(1000)
    content.put(("app", APP_SCOPE, "policy"), json.dumps("v" * 300))
    content.append(("app", APP_SCOPE, "scaling"), json.dumps({"i": 0}))
    data, dropped = content.fitted(data_size({"format": "1"}) + 400)
    assert dropped == 1 and content.histories == {} and list(data) == ["format", "value.app._5fapp.policy"]
    with pytest.raises(ValueError, match="its values alone take"):
        content.fitted(100)


def test_nothing_is_dropped_when_the_data_fits() -> None:
    content = _content()
    assert content.fitted(10_000) == (content.to_data(), 0)


# -- its keys ---------------------------------------------------------------------------------------

def test_a_bad_configmap_or_namespace_name_fails_at_startup_naming_key_value_and_what_is_accepted() -> None:
    config = AutoscalerConfig.from_keys({"stateStore": "kubernetes",
                                         "stateStore.kubernetes.configMap": "My_State",
                                         "stateStore.kubernetes.namespace": "team.a"})
    with pytest.raises(ConfigError) as refused:
        state_store_choice(config)
    assert str(refused.value).splitlines() == [
        "spark.sparkscale.stateStore.kubernetes.namespace='team.a' is not a valid Kubernetes name; expected "
        "a DNS-1123 label (a-z, 0-9 and '-', starting and ending with a letter or digit, at most 63 "
        "characters), or empty",
        "spark.sparkscale.stateStore.kubernetes.configMap='My_State' is not a valid Kubernetes name; "
        "expected a DNS-1123 subdomain (a-z, 0-9, '-' and '.', starting and ending with a letter or digit, "
        "at most 253 characters), or empty"]


def test_a_misspelt_kubernetes_key_is_refused() -> None:
    config = AutoscalerConfig.from_keys({"stateStore": "kubernetes", "stateStore.kubernetes.configmap": "x"})
    with pytest.raises(ConfigError, match=r"stateStore\.kubernetes\.configmap='x' is not a known key; "
                                          r"did you mean .*kubernetes\.configMap"):
        state_store_choice(config)


def test_building_the_store_touches_no_server_and_names_the_configmap(tmp_path: Path) -> None:
    config = AutoscalerConfig.from_keys({"stateStore": "Kubernetes", "stateStore.maxRecords": "7"})
    conf = {"spark.app.name": "Orders Job", "spark.master": "k8s://https://10.0.0.1:6443",
            "spark.kubernetes.namespace": "streaming"}
    store = build_state_store(config, spark_conf=conf)
    assert isinstance(store, KubernetesStateStore)
    assert (store.namespace, store.name, store.max_records) == ("streaming", "sparkscale-orders-job", 7)
    assert store.api.url == "https://10.0.0.1:6443" and store.fell_back is None

    chosen = AutoscalerConfig.from_keys({"stateStore": "kubernetes",
                                         "stateStore.kubernetes.namespace": "state",
                                         "stateStore.kubernetes.configMap": "orders.state"})
    store = build_state_store(chosen, spark_conf=conf)
    assert isinstance(store, KubernetesStateStore)
    assert (store.namespace, store.name) == ("state", "orders.state")
