"""Where a container's snapshots go, on a thread of their own: never the run loop's.

Every ``metrics.snapshot.interval.ms`` the :class:`SnapshotLoop` takes a snapshot of the container's
registry and hands it to each reporter: the metadata store (for the driver's ``/metrics`` and status
page) and, with ``metrics.reporters=log``, one summary line in the container's log. A reporter that
fails is logged and tried again next time: metrics must never stop a job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metrics import Registry, Sample
from millstream.contracts.metrics_snapshot import ContainerSnapshot, write_snapshot

log = logging.getLogger(__name__)


class MetricsReporter(Protocol):
    def report(self, snapshot: ContainerSnapshot) -> None: ...


class StoreReporter:
    """Ships snapshots to the driver through the metadata store (one record per container)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def report(self, snapshot: ContainerSnapshot) -> None:
        write_snapshot(self.store, snapshot)


class LogReporter:
    """A one-line summary per interval: messages processed (and the rate since the last line), lag, commits."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or log
        self._last: tuple[float, float] | None = None

    def report(self, snapshot: ContainerSnapshot) -> None:
        processed = total(snapshot.samples, "processed")
        now = time.monotonic()
        rate = ""
        if self._last is not None and now > self._last[0]:
            rate = f" ({(processed - self._last[1]) / (now - self._last[0]):,.0f}/s)"
        self._last = (now, processed)
        self.logger.info(
            "metrics: container %s (generation %s, attempt %s) processed=%d%s lag=%d commits=%d dead-lettered=%d",
            snapshot.container_id,
            snapshot.generation,
            snapshot.attempt,
            processed,
            rate,
            total(snapshot.samples, "lag"),
            total(snapshot.samples, "commits"),
            total(snapshot.samples, "dead_lettered"),
        )


def total(samples: Sequence[Sample], name: str) -> float:
    """The sum of every series of metric ``name``."""
    return sum(sample.value for sample in samples if sample.name == name)


@dataclass(frozen=True)
class SnapshotHeader:
    """Who wrote a snapshot: the driver keeps only the current generation's."""

    container_id: str
    generation: int
    attempt: int


class SnapshotLoop:
    """Takes and reports a snapshot every ``interval`` seconds until stopped, then reports a last one."""

    def __init__(
        self,
        registry: Registry,
        header: SnapshotHeader,
        reporters: Sequence[MetricsReporter],
        interval: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.registry = registry
        self.header = header
        self.reporters = list(reporters)
        self.interval = interval
        self.clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.reported = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"metrics-{self.header.container_id}", daemon=True)
        self._thread.start()

    def stop(self, state: str = "stopped") -> None:
        """Stop the thread, then report the final snapshot (``state``) from the caller's thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.report_once(state)

    def report_once(self, state: str = "running") -> None:
        try:
            samples = self.registry.snapshot()
        except Exception as error:  # a derived metric or refresh failed: skip this snapshot, not the job
            log.warning("metrics snapshot of container %s failed: %s", self.header.container_id, error)
            return
        header = self.header
        snapshot = ContainerSnapshot(
            header.container_id, header.generation, header.attempt, int(self.clock() * 1000), state, samples
        )
        for reporter in self.reporters:
            try:
                reporter.report(snapshot)
            except Exception as error:  # the store is down, say: the next interval tries again
                log.warning("metrics reporter %s failed: %s", type(reporter).__name__, error)
        self.reported += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.report_once()
