"""The Autoscaler tab's schema (``autoscaler-tab.schema.json`` beside the page's script, in the
bridge's resources) and a checker for the part of JSON Schema it uses: type, properties, required,
additionalProperties, items, enum, minimum and local ``$ref``. Small enough to read; a library would
add a dependency for a dozen keywords."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCHEMA_PATH = (Path(__file__).resolve().parents[1] / "jvm-bridge" / "src" / "main" / "resources" / "io"
               / "sparkscale" / "bridge" / "tab" / "autoscaler-tab.schema.json")
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))

_TYPES: dict[str, Any] = {
    "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def errors(value: Any, definition: str) -> list[str]:
    """What in ``value`` does not conform to ``$defs/<definition>`` (empty: it conforms)."""
    out: list[str] = []
    _check(value, SCHEMA["$defs"][definition], definition, out)
    return out


def _check(value: Any, schema: dict[str, Any], where: str, out: list[str]) -> None:
    if "$ref" in schema:
        _check(value, SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[1]], where, out)
        return
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else types
        if not any(_TYPES[t](value) for t in allowed):
            out.append(f"{where}: {value!r} is not of type {types}")
            return
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        out.append(f"{where}: {value!r} is below {schema['minimum']}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                out.append(f"{where}: {key!r} is missing")
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                _check(item, properties[key], f"{where}.{key}", out)
            elif extra is False:
                out.append(f"{where}: {key!r} is not declared")
            elif isinstance(extra, dict):
                _check(item, extra, f"{where}.{key}", out)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            _check(item, schema["items"], f"{where}[{i}]", out)
