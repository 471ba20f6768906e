"""Medians of the runs, the Markdown table the docs page shows, and the issue's targets as ratios.

Pure functions over measurements, unit-tested in ``tests/benchmarks/test_peers_report.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LIMIT_READ = "raw read (limit)"
LIMIT_COPY = "raw copy (limit)"
MILLSTREAM = "millstream, 1 container"
MILLSTREAM_METRICS = "millstream, 1 container, metrics on"
MILLSTREAM_BATCH = "millstream batch API, 1 container"
MILLSTREAM_SPARK = "millstream Spark, 2 containers"
NOT_PYTHON_PEERS = {
    LIMIT_READ,
    LIMIT_COPY,
    MILLSTREAM,
    MILLSTREAM_METRICS,
    MILLSTREAM_BATCH,
    MILLSTREAM_SPARK,
    "Spark Structured Streaming",
}


@dataclass(frozen=True)
class Measurement:
    """One verified run of one contender on one workload."""

    rate: float
    """Steady-state messages per second."""
    steady_cpu_per_million: float
    """CPU seconds per million messages within the steady window (start-up excluded)."""
    cpu_seconds: float
    """CPU seconds of the whole run, start-up and shutdown included."""
    peak_rss_bytes: int
    wall_seconds: float


@dataclass(frozen=True)
class Outcome:
    """Every run of one contender on one workload: the medians, or why it did not run."""

    contender: str
    workload: str
    messages: int
    runs: tuple[Measurement, ...] = ()
    not_run: str = ""
    runs_wanted: int = 0
    """The runs asked for; fewer were made when the contender was too slow for the time budget."""

    @property
    def rate(self) -> float:
        return statistics.median(run.rate for run in self.runs)

    @property
    def cpu_per_million(self) -> float:
        return statistics.median(run.steady_cpu_per_million for run in self.runs)

    @property
    def total_cpu_per_million(self) -> float:
        return statistics.median(run.cpu_seconds for run in self.runs) / self.messages * 1_000_000

    @property
    def peak_rss_mib(self) -> float:
        return statistics.median(run.peak_rss_bytes for run in self.runs) / 2**20


def outcomes_from_json(data: dict[str, Any]) -> list[Outcome]:
    """The outcomes of a run's ``peers.json`` (``dataclasses.asdict`` of each), to redraw or re-tabulate."""
    return [
        Outcome(
            o["contender"],
            o["workload"],
            o["messages"],
            tuple(Measurement(**run) for run in o["runs"]),
            o["not_run"],
            o["runs_wanted"],
        )
        for o in data["outcomes"]
    ]


def _cells(outcome: Outcome | None, limit: float | None) -> list[str]:
    if outcome is None:
        return ["—", "", "", ""]
    if outcome.not_run:
        return [f"not run: {outcome.not_run}", "", "", ""]
    share = f"{outcome.rate / limit:.0%}" if limit else ""
    rate = f"{outcome.rate:,.0f}"
    if len(outcome.runs) < outcome.runs_wanted:
        rate += f" ({len(outcome.runs)} run{'s' if len(outcome.runs) > 1 else ''})"
    return [rate, share, f"{outcome.cpu_per_million:,.1f}", f"{outcome.peak_rss_mib:,.0f}"]


def markdown_table(outcomes: Sequence[Outcome]) -> str:
    """One row per contender, W1 then W2: rate, share of the copy limit's rate, CPU s per 1M, peak RSS."""
    by_key = {(o.contender, o.workload): o for o in outcomes}
    copy = by_key.get((LIMIT_COPY, "w1"))
    limit = copy.rate if copy is not None and not copy.not_run else None
    header = (
        "| contender | W1 msg/s | W1 of copy | W1 CPU s/1M | W1 RSS MiB "
        "| W2 msg/s | W2 of copy | W2 CPU s/1M | W2 RSS MiB |"
    )
    lines = [header, "|" + "---|" * 9]
    names = list(dict.fromkeys(o.contender for o in outcomes))
    for name in names:
        cells = _cells(by_key.get((name, "w1")), limit) + _cells(by_key.get((name, "w2")), limit)
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def targets(outcomes: Sequence[Outcome]) -> list[str]:
    """The issue's targets as measured ratios, one line each; a ratio missing a contender says so."""
    ran = {(o.contender, o.workload): o for o in outcomes if not o.not_run and o.runs}

    def ratio(numerator: tuple[str, str], denominator: tuple[str, str], goal: float, label: str) -> str:
        if numerator not in ran or denominator not in ran:
            return f"{label}: not measured (missing {numerator if numerator not in ran else denominator})"
        value = ran[numerator].rate / ran[denominator].rate
        return f"{label}: {value:.2f} (target ≥ {goal:g}) — {'met' if value >= goal else 'not met'}"

    lines = [
        ratio((MILLSTREAM, "w1"), (LIMIT_COPY, "w1"), 0.75, "W1 millstream / raw copy"),
        ratio((MILLSTREAM, "w2"), (LIMIT_COPY, "w1"), 0.5, "W2 millstream / raw copy"),
        ratio((MILLSTREAM_SPARK, "w1"), (MILLSTREAM, "w1"), 1.7, "W1 Spark 2 containers / 1 container"),
    ]
    for workload in ("w1", "w2"):
        peers = [o for (name, w), o in ran.items() if w == workload and name not in NOT_PYTHON_PEERS]
        ours = ran.get((MILLSTREAM, workload))
        if not peers or ours is None:
            lines.append(f"{workload.upper()} against the best Python peer: not measured")
            continue
        fastest = max(peers, key=lambda o: o.rate)
        cheapest = min(peers, key=lambda o: o.cpu_per_million)
        rate = ours.rate / fastest.rate
        cpu = cheapest.cpu_per_million / ours.cpu_per_million
        lines.append(
            f"{workload.upper()} millstream / best Python peer: rate {rate:.2f}x ({fastest.contender}), "
            f"CPU per message {cpu:.2f}x ({cheapest.contender}) (target ≥ 1.5 each) — "
            f"{'met' if min(rate, cpu) >= 1.5 else 'not met'}"
        )
    lines.append(ratio((MILLSTREAM_BATCH, "w1"), (LIMIT_COPY, "w1"), 0.75, "W1 millstream batch API / raw copy"))
    lines.append(ratio((MILLSTREAM_BATCH, "w2"), (LIMIT_COPY, "w1"), 0.5, "W2 millstream batch API / raw copy"))
    for workload in ("w1", "w2"):
        on, off = ran.get((MILLSTREAM_METRICS, workload)), ran.get((MILLSTREAM, workload))
        if on is not None and off is not None:  # a cost to report, not a target
            lines.append(
                f"{workload.upper()} metrics on / off: rate {on.rate / off.rate:.2f}, "
                f"CPU per message {on.cpu_per_million / off.cpu_per_million:.2f}"
            )
    return lines
