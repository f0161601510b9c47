"""The real-Spark tests' wait helper: what the autoscaler decided during a long wait, folded."""

from __future__ import annotations

from typing import Any

from sparkscale_listener.testing import demo


class _Scaler:
    def __init__(self, decisions: list[dict[str, Any]]) -> None:
        self._decisions = decisions

    def decisions(self) -> list[dict[str, Any]]:
        return self._decisions


def _decision(t: float, action: str, reason: str, applied: bool = False, to: int = 2) -> dict[str, Any]:
    return {"time": t, "action": action, "from_executors": 2, "to_executors": to, "applied": applied,
            "reason": reason}


def test_repeats_of_one_action_and_reason_fold_into_a_line_and_older_decisions_are_left_out() -> None:
    scaler = _Scaler([_decision(90, "hold", "before the wait")]
                     + [_decision(100 + i, "hold", "waiting for a batch started after it came due")
                        for i in range(3)]
                     + [_decision(104, "scale_down", "load fell", applied=True, to=1),
                        _decision(105, "hold", "waiting for a batch started after it came due")])
    assert demo.decided_since(scaler, since=95) == [
        "+5s hold 2->2 (x3): waiting for a batch started after it came due",
        "+9s scale_down 2->1 applied: load fell",
        "+10s hold 2->2: waiting for a batch started after it came due",
    ]
