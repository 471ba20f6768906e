"""The steady part of a run, and what it cost: pure functions over timestamps and CPU samples, so the
figures are unit-tested without a broker or a process.

The window is read off the output topic's broker append times (the same clock for every contender,
whatever it reports about itself); the CPU of that window comes from the process tree's samples.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

STEADY_TRIM = 0.05
"""The share of output cut at each end before the rate is measured: start-up and shutdown are not
steady state."""


@dataclass(frozen=True)
class SteadyWindow:
    """The steady part of a run: ``messages`` output between wall-clock ``start`` and ``end`` (seconds)."""

    messages: int
    start: float
    end: float

    @property
    def rate(self) -> float:
        return self.messages / max(self.end - self.start, 0.001)


def steady_window(timestamps_ms: Iterable[int], trim: float = STEADY_TRIM) -> SteadyWindow:
    """The window between the ``trim`` and ``1 - trim`` quantiles of the output's broker append times:
    the contender running, without its start-up or shutdown."""
    ordered = sorted(timestamps_ms)
    if len(ordered) < 2:
        raise ValueError(f"a rate needs at least two messages, got {len(ordered)}")
    first = int(len(ordered) * trim)
    last = max(first + 1, int(len(ordered) * (1 - trim)) - 1)
    return SteadyWindow(last - first, ordered[first] / 1000, ordered[last] / 1000)


def cpu_between(series: tuple[tuple[float, float], ...], start: float, end: float) -> float:
    """CPU seconds the tree used between wall-clock ``start`` and ``end``, interpolated between samples:
    the steady-state cost, without the start-up (a JVM's, a rebalance's) that a total would include."""
    return _cpu_at(series, end) - _cpu_at(series, start)


def _cpu_at(series: tuple[tuple[float, float], ...], moment: float) -> float:
    if not series or moment <= series[0][0]:
        return series[0][1] if series else 0.0
    for (t0, c0), (t1, c1) in itertools.pairwise(series):
        if t0 <= moment <= t1:
            return c0 + (c1 - c0) * (moment - t0) / max(t1 - t0, 1e-9)
    return series[-1][1]
