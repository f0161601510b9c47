"""Keys whose prefix is a near miss of ``spark.sparkscale.`` (``spark.sparkScale.maxExecutors``): no
validation sees them, since they are not under our prefix, so they would be ignored silently. (The
"did you mean" of unknown keys and values under the prefix is :func:`.options.did_you_mean`.)"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from .options import CLOSE_RATIO, PREFIX

_NAMESPACE = PREFIX.split(".")[1]  # "sparkscale"


def _normalized(component: str) -> str:
    return component.lower().replace("-", "").replace("_", "")


def _is_near_miss(component: str) -> bool:
    if component == _NAMESPACE:
        return False
    normal = _normalized(component)
    return (normal == _NAMESPACE or normal.startswith(_NAMESPACE[:-1])
            or difflib.SequenceMatcher(None, normal, _NAMESPACE).ratio() >= CLOSE_RATIO)


def misspelt_prefix_keys(conf: Mapping[str, str]) -> dict[str, str]:
    """Keys meant for sparkscale but outside ``spark.sparkscale.``: ``{key as given: key meant}``.

    A key counts when its namespace (the component after ``spark.``, or the first one when
    ``spark.`` is missing) differs from ``sparkscale`` only in case, in ``-``/``_``, or by a letter
    or two: ``spark.sparkScale.x``, ``spark.spark-scale.x``, ``spark.sparkscaler.x``,
    ``spark.sparkcale.x``, ``sparkscale.x``. No Spark namespace is that close to ``sparkscale``.
    """
    meant = {}
    for key in conf:
        parts = key.split(".")
        if len(parts) >= 3 and parts[0] == "spark" and _is_near_miss(parts[1]):
            meant[key] = PREFIX + ".".join(parts[2:])
        elif len(parts) >= 2 and parts[0] != "spark" and (parts[0] == _NAMESPACE or _is_near_miss(parts[0])):
            meant[key] = PREFIX + ".".join(parts[1:])
    return meant


def misspelt_prefix_warning(conf: Mapping[str, str]) -> str | None:
    """One warning naming every key :func:`misspelt_prefix_keys` finds, or None."""
    meant = misspelt_prefix_keys(conf)
    if not meant:
        return None
    if len(meant) == 1:
        ((key, right),) = meant.items()
        return (f"{key}={conf[key]!r} is ignored: did you mean {right}? sparkscale reads only the keys "
                f"that start with {PREFIX}")
    listed = "; ".join(f"{key}={conf[key]!r} (did you mean {right}?)" for key, right in sorted(meant.items()))
    return f"{len(meant)} keys are ignored, sparkscale reads only the keys that start with {PREFIX}: {listed}"
