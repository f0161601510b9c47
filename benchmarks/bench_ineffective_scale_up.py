"""How often ineffective-scale-up detection blocks a scale-up that was in fact effective: run on
purpose (`.venv/bin/python benchmarks/bench_ineffective_scale_up.py`), prints its numbers.

Flink's autoscaler turned blocking on this signal off by default after false positives. Here the
simulator drives the real control loop through loads where every scale-up helps (steps, a spike,
a compressed day, a ramp; with and without noise and a trigger interval): every block it reports
is a false positive. A load that more executors cannot speed up (a query bound by its driver)
is the true positive, and must still be blocked.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sparkscale_listener.config.core import AutoscalerConfig
from sparkscale_listener.sim import SimQuery, Simulation, step_load

HOUR = 3600.0
SHAPES: dict[str, Callable[[float], float]] = {
    "step x2": step_load(500.0, 1000.0, 600.0),
    "step x4": step_load(500.0, 2000.0, 600.0),
    "step /4": step_load(2000.0, 500.0, 600.0),
    "spike": lambda t: 2000.0 if 600.0 <= t < 720.0 else 500.0,
    "day": lambda t: 1000.0 + 800.0 * math.sin(2 * math.pi * t / HOUR),
    "ramp": lambda t: 200.0 + t,
}


def blocks(query: SimQuery, seed: int) -> int:
    sim = Simulation(AutoscalerConfig(max_executors=20), [query], 2, seed=seed, cores_per_executor=4)
    result = sim.run(HOUR)
    return sum(1 for e in result.events if e.kind == "blocked" and e.reason.startswith("blocked"))


def main() -> None:
    print("load shape        runs  runs with a block  blocks")
    total_runs = total_blocks = 0
    for name, load in SHAPES.items():
        runs = blocked_runs = count = 0
        for seed in range(6):
            for noise in (0.0, 0.2):
                for trigger in (None, 5.0):
                    query = SimQuery("q", load=load, cost_per_row=0.004, noise=noise,
                                     trigger_interval_s=trigger)
                    n = blocks(query, seed)
                    runs, blocked_runs, count = runs + 1, blocked_runs + (n > 0), count + n
        total_runs, total_blocks = total_runs + runs, total_blocks + count
        print(f"{name:<16} {runs:>5}  {blocked_runs:>17}  {count:>6}")
    print(f"false positives: {total_blocks} blocks in {total_runs} simulated hours")
    # The true positive: the driver's 2 s per 1000-row batch bounds the query below 500 rows/s
    # whatever the executors (a driver-bound query); it should be blocked after one scale-up.
    bound = SimQuery("q", lambda t: 2000.0, cost_per_row=0.001, batch_overhead_s=2.0,
                     max_rows_per_batch=1000.0)
    print(f"driver-bound query (true positive): {blocks(bound, 6)} block(s)")


if __name__ == "__main__":
    main()
