"""The peer benchmark's figures: the steady window and its CPU, the medians, the table the docs page
shows (naming a contender that did not run, or ran fewer times than asked) and the targets' ratios."""

from __future__ import annotations

import pytest

from benchmarks.peers.report import (
    LIMIT_COPY,
    MILLSTREAM,
    MILLSTREAM_BATCH,
    MILLSTREAM_METRICS,
    Measurement,
    Outcome,
    markdown_table,
    targets,
)
from benchmarks.peers.window import cpu_between, steady_window


def test_the_steady_window_leaves_out_the_first_and_last_five_percent():
    # 100 messages: the first 10 at t=0 (start-up burst), then one per 10 ms.
    timestamps = [0] * 10 + [1_000 + 10 * i for i in range(90)]
    window = steady_window(timestamps)
    assert (window.messages, window.start, window.end) == (89, 0.0, 1.84)
    assert window.rate == pytest.approx(89 / 1.84)


def test_the_cpu_of_a_window_is_interpolated_between_samples():
    series = ((10.0, 0.0), (11.0, 1.0), (13.0, 2.0))
    assert cpu_between(series, 10.5, 12.0) == pytest.approx(1.5 - 0.5)
    assert cpu_between(series, 5.0, 20.0) == pytest.approx(2.0)


def outcome(name: str, workload: str, rates: list[float], cpu: float = 10.0) -> Outcome:
    runs = tuple(Measurement(rate, cpu, 30.0, 100 * 2**20, 40.0) for rate in rates)
    return Outcome(name, workload, 1_000_000, runs)


def test_the_table_shows_medians_the_share_of_the_copy_limit_and_why_a_contender_did_not_run():
    outcomes = [
        outcome(LIMIT_COPY, "w1", [200_000, 100_000, 300_000]),
        outcome(MILLSTREAM, "w1", [50_000, 40_000, 60_000], cpu=20.0),
        Outcome(MILLSTREAM, "w2", 1_000_000, not_run="exited 1: boom"),
        Outcome("Faust", "w1", 1_000_000, outcome("Faust", "w1", [5_000]).runs, runs_wanted=3),
    ]
    lines = markdown_table(outcomes).splitlines()
    assert lines[2].startswith("| raw copy (limit) | 200,000 | 100% | 10.0 | 100 | — |")
    assert lines[3].startswith("| millstream, 1 container | 50,000 | 25% | 20.0 | 100 | not run: exited 1: boom |")
    assert lines[4].startswith("| Faust | 5,000 (1 run) | 2% |")


def test_targets_are_ratios_of_medians_and_say_what_is_missing():
    outcomes = [
        outcome(LIMIT_COPY, "w1", [100_000]),
        outcome(MILLSTREAM, "w1", [80_000], cpu=10.0),
        outcome("Quix Streams", "w1", [40_000], cpu=30.0),
        outcome("Bytewax", "w1", [50_000], cpu=12.0),
        outcome(MILLSTREAM_BATCH, "w1", [70_000], cpu=8.0),
    ]
    lines = targets(outcomes)
    assert lines[0] == "W1 millstream / raw copy: 0.80 (target ≥ 0.75) — met"
    assert lines[1].startswith("W2 millstream / raw copy: not measured")
    assert lines[3] == (
        "W1 millstream / best Python peer: rate 1.60x (Bytewax), CPU per message 1.20x (Bytewax) "
        "(target ≥ 1.5 each) — not met"
    )
    assert lines[5] == "W1 millstream batch API / raw copy: 0.70 (target ≥ 0.75) — not met"
    assert lines[6].startswith("W2 millstream batch API / raw copy: not measured")
    assert len(lines) == 7, "no metrics line without the metrics-on contender"


def test_the_cost_of_metrics_is_the_ratio_of_metrics_on_to_off_for_each_workload_measured():
    outcomes = [
        outcome(MILLSTREAM, "w1", [80_000], cpu=10.0),
        outcome(MILLSTREAM_METRICS, "w1", [72_000], cpu=11.0),
        outcome(MILLSTREAM, "w2", [50_000], cpu=10.0),
    ]
    assert targets(outcomes)[-1] == "W1 metrics on / off: rate 0.90, CPU per message 1.10"
