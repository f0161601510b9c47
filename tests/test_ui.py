"""The UI publisher: the document the Autoscaler tab renders (no Spark; the tab itself is tested on
a real job in tests/integration/test_ui_and_metrics.py)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from harness import query, sample
from sparkscale_listener.config import AutoscalerConfig
from sparkscale_listener.decisions import Decision
from sparkscale_listener.metrics import MetricSample
from sparkscale_listener.ui import UiPublisher


class _Sink:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.documents: list[str] = []

    def publish_status(self, json_text: str) -> None:
        if self.fail:
            raise RuntimeError("the JVM is gone")
        self.documents.append(json_text)


@dataclass
class _FakeAutoscaler:
    # The publisher reads only the interval, the window and the limits of the configuration.
    config: AutoscalerConfig = field(default_factory=lambda: AutoscalerConfig(
        interval_s=2.0, metrics_window_s=10.0, max_executors=3))
    app_name: str = "app"
    history: list[dict[str, Any]] = field(default_factory=list)
    target: int = 1

    def status(self) -> dict[str, Any]:
        return {"mode": "autoscale", "target_executors": self.target, "initial_executors": 1,
                "live_executors": 1, "pending_executors": 0, "paused": False, "pause_reason": None,
                "stopped": False, "last_decision": None, "last_scaling": None, "errors": 0}

    def decisions(self) -> list[dict[str, Any]]:
        return list(self.history)


def _sample(t: float, rows: int, backlog: float, name: str = "q<1>") -> MetricSample:
    return sample(t, live=1, cores=1,
                  queries=[query("id-1", name=name, input_rows=rows, backlog=backlog, input_rate=10.0)])


def test_publisher_collapses_idle_decisions_and_bounds_the_timeline() -> None:
    sink = _Sink()
    scaler = _FakeAutoscaler()
    publisher = UiPublisher(sink, max_points=5)
    for i in range(8):
        action = "scale_up" if i == 4 else "none"
        decision = Decision(float(i), action, 1, 2 if action != "none" else 1, f"reason {i} <b>&",
                            applied=action != "none")
        publisher.observe(scaler, _sample(float(i), rows=100 * i, backlog=10.0 * i), [decision])  # type: ignore[arg-type]
    doc = json.loads(sink.documents[-1])
    collapsed = [(d["action"], d["count"]) for d in doc["decisions"]]
    assert collapsed == [("none", 4), ("scale_up", 1), ("none", 3)]
    assert doc["decisions"][0]["first_time"] == 0.0 and doc["decisions"][0]["reason"] == "reason 3 <b>&"
    assert [p["t"] for p in doc["timeline"]] == [3.0, 4.0, 5.0, 6.0, 7.0]
    last = doc["timeline"][-1]
    # 100 rows/s processed and 10 rows/s of backlog growth, over the 10 s metrics window (7 s so far).
    assert math.isclose(last["processed_rate"], 100.0) and math.isclose(last["arrival_rate"], 110.0)
    assert last["backlog"] == 70.0 and doc["queries"][0]["name"] == "q<1>"


def test_publisher_never_raises() -> None:
    publisher = UiPublisher(_Sink(fail=True))
    scaler = _FakeAutoscaler()
    publisher.observe(scaler, _sample(1.0, 1, 1.0), [])  # type: ignore[arg-type]
    publisher.observe(object(), None, [])  # type: ignore[arg-type]
    assert publisher.published == 0
