"""benchmarks/bench_cost.py: its pure-Python parts run, and its figures are computed right.
No timing is checked here (the benchmark is run on purpose, not in CI)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_cost.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_cost", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_cost"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


bench = _load()


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(10, 0, -1)]  # 10..1, unsorted on purpose
    assert bench.percentile(values, 0.9) == 9.0
    assert bench.percentile(values, 0.5) == 5.0
    assert bench.percentile(values, 1.0) == 10.0
    assert bench.percentile(values, 0.0) == 1.0
    assert bench.percentile([3.0], 0.9) == 3.0
    with pytest.raises(ValueError):
        bench.percentile([], 0.5)


def test_summary() -> None:
    s = bench.summary([4.0, 1.0, 3.0, 2.0])
    assert s == {"n": 4, "min": 1.0, "median": 2.5, "p90": 4.0, "max": 4.0}


def test_rate() -> None:
    assert bench.rate(3_000_000, 2.0) == 1_500_000
    assert bench.rate(5, 0.0) == 0.0


def test_latency_ratio_per_pair_and_pooled() -> None:
    pairs = [([110.0, 100.0, 120.0], [100.0, 90.0, 110.0]),  # medians 110 / 100
             ([99.0, 101.0, 100.0], [100.0, 100.0, 100.0])]  # medians 100 / 100
    r = bench.latency_ratio(pairs)
    assert r.ratios == pytest.approx((1.1, 1.0))
    assert r.median == pytest.approx(1.05)
    assert (r.low, r.high) == pytest.approx((1.0, 1.1))
    # pooled: median of (110, 100, 120, 99, 101, 100) = 100.5 over median of (100, 90, 110, 100 x3) = 100
    assert r.pooled == pytest.approx(1.005)
    assert r.overhead_pct == pytest.approx(5.0)


@pytest.mark.parametrize(("ratios", "verdict"), [
    ((1.01, 0.99, 1.0), "**met**"),
    ((1.04, 1.05, 1.06), "**missed**"),
    ((1.062, 0.915, 1.002, 1.077, 0.946), "**not separable**"),  # 2026-11-27's five pairs
])
def test_the_latency_verdict_says_when_the_pairs_spread_more_than_the_target(
        ratios: tuple[float, ...], verdict: str) -> None:
    r = bench.RatioSummary(ratios, sorted(ratios)[len(ratios) // 2], min(ratios), max(ratios), 1.0)
    assert r.verdict().startswith(verdict)


def test_first_dropping_rate() -> None:
    paced = [{"postedTaskEndsPerSecond": 100.0, "dropped": 0},
             {"postedTaskEndsPerSecond": 200.0, "dropped": 0},
             {"postedTaskEndsPerSecond": 300.0, "dropped": 12},
             {"postedTaskEndsPerSecond": 400.0, "dropped": 99}]
    assert bench.first_dropping_rate(paced) == (200.0, 300.0)
    assert bench.first_dropping_rate(paced[:2]) == (200.0, None)
    assert bench.first_dropping_rate(paced[2:]) == (None, 300.0)


def test_latency_runs_alternate_and_are_counterbalanced() -> None:
    order = bench.latency_order(3)
    assert order == ["with", "without", "without", "with", "with", "without"]
    assert order.count("with") == order.count("without") == 3


def test_tick_samples_are_cumulative() -> None:
    samples = list(bench.tick_samples(queries=3, executors=5, ticks=4))
    assert [s.time for s in samples] == [10.0, 20.0, 30.0, 40.0]
    assert all(s.cluster.live_executors == 5 and len(s.cluster.executors) == 5 for s in samples)
    for qid in samples[0].queries:
        rows = [s.queries[qid].input_rows for s in samples]
        assert rows == sorted(rows) and rows[0] > 0


def test_tick_bench_runs_the_real_loop() -> None:
    r = bench.bench_tick(queries=2, executors=10, warmup=8, ticks=5)
    assert len(r.times_ms) == 5 and all(t > 0 for t in r.times_ms)
    assert r.errors == 0
    assert sum(r.decisions.values()) >= 5  # one decision per tick at least
    assert r.py4j_calls_per_tick > 0  # the gauge and UI publishers reached the sink
    assert r.stats["median"] <= r.stats["p90"] <= r.stats["max"]


def test_report_renders_the_pure_python_sections() -> None:
    ticks = [bench.bench_tick(queries=1, executors=10, warmup=8, ticks=3)]
    latency = {"runs": [{"arm": "with", "latencies_ms": [110.0, 100.0], "ticks_ms": [2.0]},
                        {"arm": "without", "latencies_ms": [100.0, 100.0]}],
               "ratio": bench.latency_ratio([([110.0, 100.0], [100.0, 100.0])])}
    text = bench.render_report({"tick": ticks, "latency": latency, "sim": {"seconds": 1.0, "ticks": 8640}},
                               {"command": "bench", "date": "today", "machine": "test"})
    assert "| 1 | 10 |" in text
    assert "median 1.050" in text
    assert "8640 ticks" in text


def test_a_run_of_some_sections_keeps_the_others_in_the_report() -> None:
    old = "# T\n\nold preamble\n\n## 1. Bridge\n\nold bridge\n\n## 3. Tick\n\nold tick\n"
    new = "# T\n\nnew preamble\n\n## 3. Tick\n\nnew tick\n"
    merged = bench.merge_report(old, new)
    assert "new preamble" in merged and "old preamble" not in merged
    assert "old bridge" in merged and "new tick" in merged and "old tick" not in merged
    assert merged.index("## 1.") < merged.index("## 3.")
    assert bench.merge_report("", new) == bench.merge_report(new, new)


def test_the_tick_compared_with_a_commit_runs_both_in_one_process_and_leaves_no_module_behind() -> None:
    compared = bench.compare_ticks("HEAD", queries=2, executors=10, warmup=3, ticks=4)
    assert set(compared["cpu"]) == {"this tree", "HEAD"}
    assert all(c["n"] == 4 for c in compared["cpu"].values())
    assert compared["ratio_median"] > 0
    assert compared["errors"] == {"this tree": 0, "HEAD": 0}
    assert not [m for m in sys.modules if m.startswith("sparkscale_against")]
