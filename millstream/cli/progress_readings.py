"""What the progress line of ``millstream run`` shows, computed from readings of the metadata store, without I/O.

Three things a user took for lost data or a stalled job are decided here:

- **Positions, not messages seen.** A restarted container starts counting its messages from zero again, so a
  sum of the containers' counters ends below the input after a restart (``31132/50000 finished``). A bounded
  job's bar is therefore what its tasks' positions moved: for each input partition, its lag when the run
  started minus its lag now. A count (unbounded inputs) adds up each series' increases, a counter that went
  back being a new attempt that counts from zero.
- **A rate that only moves with the figure.** The store is polled more often than containers report, so a
  rate taken at every poll read ``0 msg/s`` between reports while the job worked. :class:`Rate` takes the rate
  between readings that moved the figure, on the readings' own clock, and shows 0 only once no reading moved
  it for a while.
- **A restart is one line with its cause** (:class:`RestartWatch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from millstream.contracts.metrics import Sample
from millstream.model import SystemStreamPartition

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def ssp_of(sample: Sample) -> SystemStreamPartition | None:
    """The input partition a per-partition sample is about (None for any other sample)."""
    labels = dict(sample.labels)
    try:
        return SystemStreamPartition(labels["system"], labels["stream"], int(labels["partition"]))
    except (KeyError, ValueError):
        return None


def moved_positions(start_lags: Mapping[SystemStreamPartition, int], samples: Iterable[Sample]) -> int:
    """How far the tasks' positions moved since the run started: per partition whose ``lag`` was reported,
    its lag at the start minus its lag now (never below 0: a restart from an older checkpoint re-reads)."""
    moved = 0
    for sample in samples:
        ssp = ssp_of(sample) if sample.name == "lag" else None
        if ssp is not None and ssp in start_lags:
            moved += max(0, start_lags[ssp] - int(sample.value))
    return moved


class ProcessedCount:
    """Messages processed since the run started, summed over every series of the ``processed`` counter; a
    series whose value went back belongs to a new attempt, which counts from zero."""

    def __init__(self) -> None:
        self._last: dict[SeriesKey, float] = {}
        self.total = 0.0

    def add(self, samples: Iterable[Sample]) -> float:
        for sample in samples:
            if sample.name != "processed":
                continue
            key = (sample.name, sample.labels)
            last = self._last.get(key, 0.0)
            self.total += sample.value - last if sample.value >= last else sample.value
            self._last[key] = sample.value
        return self.total


class Rate:
    """Messages per second between the last two readings that moved the figure.

    ``at`` is the readings' own clock in seconds (the snapshots' write time, or the poller's monotonic clock);
    a reading that did not move the figure keeps the last rate, until ``stale_after`` seconds without a
    move show 0 (the job is idle, or stalled)."""

    def __init__(self, stale_after: float) -> None:
        self.stale_after = stale_after
        self._moved: tuple[float, float] | None = None
        self.per_second: float | None = None

    def reading(self, at: float, value: float) -> float | None:
        if self._moved is None:
            self._moved = (at, value)
        elif value != self._moved[1] and at > self._moved[0]:
            self.per_second = max(0.0, value - self._moved[1]) / (at - self._moved[0])
            self._moved = (at, value)
        elif at - self._moved[0] >= self.stale_after:
            self.per_second = 0.0
        return self.per_second


class RestartWatch:
    """Turns successive readings of the containers' status records into one line per container restart.

    A container's status counts its restarts within the generation (``restarts``) and says why its latest
    attempt started (``restart-cause``: the previous attempt's error, or that it ended without a word), as the
    new attempt read it from the previous attempt's status: nothing is lost however late a reading comes."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, int], int] = {}

    def lines(self, statuses: Mapping[str, Mapping[str, Any]]) -> list[str]:
        lines = []
        for container_id, status in sorted(statuses.items()):
            try:
                generation, attempt = int(status["generation"]), int(status["attempt"])
                restarts = int(status.get("restarts", 0))
            except (KeyError, TypeError, ValueError):
                continue
            key = (container_id, generation)
            if restarts <= self._seen.get(key, 0):
                continue
            self._seen[key] = restarts
            cause = status.get("restart-cause") or "the previous attempt ended without reporting a cause"
            lines.append(f"container {container_id} restarted (attempt {attempt}): {cause}")
        return lines
