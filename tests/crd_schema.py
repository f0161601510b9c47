"""Kubernetes custom resources checked against their CustomResourceDefinition's structural schema
(``openAPIV3Schema``), as the API server checks them under strict field validation (``kubectl apply``'s
default): a wrong type, a value outside an enum, a missing required field or a field the schema does not
declare is an error. The schemas are copies kept in ``tests/data/kubernetes/`` (their README says where
each comes from), one file per CRD and served version, named ``<plural>.<group>_<version>.json``.

The checker covers the keywords the Spark operators' CRDs use, like ``tab_schema.py`` for the Autoscaler
tab's schema: a library would add a dependency for a dozen keywords. A keyword it does not know is
reported by :func:`unknown_keywords`, so a refreshed copy that uses a new one fails its test instead of
passing unchecked."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data" / "kubernetes"

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}
CHECKED = frozenset({"type", "properties", "required", "items", "enum", "additionalProperties",
                     "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "anyOf",
                     "minimum", "maximum", "pattern", "nullable"})
# Not checked: text, a default the server fills in, how lists and maps merge (the server also refuses a
# duplicate in a list of type set or map; the manifests here have no such lists) and formats (int32 and
# int64 ranges; their numbers are small).
NOT_CHECKED = frozenset({"description", "default", "format", "x-kubernetes-list-type",
                         "x-kubernetes-list-map-keys", "x-kubernetes-map-type"})
# Every resource has these, whether its CRD's schema declares them or not, and the API server checks
# them itself (the type's name, ObjectMeta), not through the schema.
_SERVER_FIELDS = {key: {"x-kubernetes-preserve-unknown-fields": True}
                  for key in ("apiVersion", "kind", "metadata")}


def crd_schema(crd: str, version: str) -> dict[str, Any]:
    """The saved ``openAPIV3Schema`` of ``crd`` (``sparkapplications.spark.apache.org``) at ``version``."""
    return json.loads((DATA / f"{crd}_{version}.json").read_text(encoding="utf-8"))


def api_version(crd: str, version: str) -> str:
    """The ``apiVersion`` a resource of this CRD and version carries: ``<group>/<version>``."""
    return f"{crd.split('.', 1)[1]}/{version}"


def resource_errors(resource: dict[str, Any], crd: str, version: str) -> list[str]:
    """What in ``resource`` (a parsed manifest) the API server would refuse (empty: it conforms)."""
    out: list[str] = []
    if resource.get("apiVersion") != api_version(crd, version):
        out.append(f"apiVersion: {resource.get('apiVersion')!r} is not {api_version(crd, version)!r}")
    if not isinstance(resource.get("metadata"), dict) or "name" not in resource["metadata"]:
        out.append("metadata.name is missing")
    schema = crd_schema(crd, version)
    root = {**schema, "properties": {**schema.get("properties", {}), **_SERVER_FIELDS}}
    _check(resource, root, resource.get("kind", "resource"), out)
    return out


def unknown_keywords(schema: dict[str, Any]) -> set[str]:
    """Schema keywords used anywhere in ``schema`` that this checker neither checks nor knows to be
    harmless (empty: it understands the whole schema)."""
    return {key for node in _nodes(schema) for key in node} - CHECKED - NOT_CHECKED


def _nodes(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield schema
    for child in schema.get("properties", {}).values():
        yield from _nodes(child)
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _nodes(schema[key])
    for branch in schema.get("anyOf", []):
        yield from _nodes(branch)


def _check(value: Any, schema: dict[str, Any], where: str, out: list[str]) -> None:
    if value is None:
        if not schema.get("nullable", False):
            out.append(f"{where}: null is not allowed")
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not (_TYPES["integer"](value) or isinstance(value, str)):
            out.append(f"{where}: {value!r} is neither an integer nor a string")
        return
    if "type" in schema and not _TYPES[schema["type"]](value):
        out.append(f"{where}: {value!r} is not of type {schema['type']}")
        return
    if "anyOf" in schema and not any(_conforms(value, branch, where) for branch in schema["anyOf"]):
        out.append(f"{where}: {value!r} matches none of {schema['anyOf']}")
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        out.append(f"{where}: {value!r} is below {schema['minimum']}")
    if "maximum" in schema and _TYPES["number"](value) and value > schema["maximum"]:
        out.append(f"{where}: {value!r} is above {schema['maximum']}")
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        out.append(f"{where}: {value!r} does not match {schema['pattern']!r}")
    if isinstance(value, dict):
        _check_object(value, schema, where, out)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{where}[{i}]", out)


def _check_object(value: dict[str, Any], schema: dict[str, Any], where: str, out: list[str]) -> None:
    for key in schema.get("required", []):
        if key not in value:
            out.append(f"{where}: {key!r} is missing")
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    open_ended = schema.get("x-kubernetes-preserve-unknown-fields", False) or extra is True
    for key, item in value.items():
        if key in properties:
            _check(item, properties[key], f"{where}.{key}", out)
        elif isinstance(extra, dict):
            _check(item, extra, f"{where}.{key}", out)
        elif not open_ended:
            # A structural schema prunes undeclared fields; strict field validation refuses them.
            out.append(f"{where}: {key!r} is not declared")


def _conforms(value: Any, schema: dict[str, Any], where: str) -> bool:
    found: list[str] = []
    _check(value, schema, where, found)
    return not found
