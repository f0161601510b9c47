"""Backlog for a source Spark cannot see into, supplied by a custom collector.

Some sources report no backlog in their progress (a socket, a custom receiver, a queue read
through foreachBatch). If something else knows it (the broker's admin API, a monitoring system,
a file a sidecar writes), a collector can add it as an external metric named
``backlog.<query name>``; the built-in evaluator uses it exactly like a reported backlog.

    spark.sparkscale.collector               = examples.external_backlog.FileBacklogCollector
    spark.sparkscale.collector.backlogFile   = /var/run/orders-backlog.json

The file holds ``{"<query name>": <rows waiting>, ...}`` and is re-read every control tick; an
HTTP endpoint would work the same way (keep the call short: it runs on the control-loop thread).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from sparkscale_listener.plugins import Option, PluginContext, SparkMetricCollector, Text

log = logging.getLogger("sparkscale")


def read_backlog_file(path: str | Path) -> dict[str, float]:
    """``{"q": 123}`` in the file -> ``{"backlog.q": 123.0}``; a missing or bad file -> ``{}``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.warning("cannot read backlog file %s: %s", path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {f"backlog.{name}": float(value) for name, value in data.items()
            if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0}


class FileBacklogCollector(SparkMetricCollector):
    """The built-in collector plus ``backlog.<query>`` external metrics read from a JSON file."""

    options = (Option("backlogFile", Text(), "", "JSON file {query name: rows waiting}"),)

    def __init__(self, context: PluginContext) -> None:
        self.backlog_file = context.options.read(self.options)["backlogFile"]
        if not self.backlog_file:
            from sparkscale_listener.plugins import ConfigError

            raise ConfigError("spark.sparkscale.collector.backlogFile is empty; expected the path of "
                              "a JSON file {query name: backlog}")
        super().__init__(context)

    def query_external_metrics(self, now: float) -> dict[str, float]:
        return read_backlog_file(self.backlog_file)
