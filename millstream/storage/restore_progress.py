"""How far the restore of one store of one task has come, for the operator waiting on it.

A restore can take minutes (a changelog replay, a snapshot download of gigabytes) while the task shows
nothing else. Each backend's restore manager reports what it applied or downloaded to a
:class:`RestoreProgress`, which keeps gauges (records and bytes done and expected, the rate) and a timer
of the store's restore, and logs a progress line every ``log_interval`` seconds::

    restoring store counts of task Partition 3: 1.2 GB / 4.0 GB, 85.0 MB/s

What a backend cannot know in advance (a changelog replay's bytes, a download's records) is left out of
the line and its expected gauge stays unset. Updates come from the thread restoring the store, and for a
download also from its transfer threads, so they are taken under a lock; they are per batch or per file,
never per record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from millstream.contracts.metrics import MetricsRegistry

log = logging.getLogger(__name__)

LOG_INTERVAL_SECONDS = 10.0
"""How often a restore that is still running logs its progress."""

_UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def human_bytes(amount: float) -> str:
    """``amount`` in decimal units with one decimal (``1.2 GB``), the way transfer rates are quoted."""
    for unit in _UNITS[:-1]:
        if abs(amount) < 1000:
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1000
    return f"{amount:.1f} {_UNITS[-1]}"


class RestoreProgress:
    """The progress of restoring store ``store`` of task ``task``; see the module docstring."""

    def __init__(
        self,
        metrics: MetricsRegistry,
        task: str,
        store: str,
        *,
        records_expected: int | None = None,
        bytes_expected: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        log_interval: float = LOG_INTERVAL_SECONDS,
        logger: logging.Logger = log,
    ) -> None:
        self.task = task
        self.store = store
        self.records_expected = records_expected
        self.bytes_expected = bytes_expected
        self.records = 0
        self.bytes = 0
        self._clock = clock
        self._log_interval = log_interval
        self._logger = logger
        self._lock = threading.Lock()
        self._started = self._next_log = clock()
        self._next_log += log_interval
        labels = {"task": task, "store": store}
        self._records = metrics.gauge("store_restored_records", **labels)
        self._bytes = metrics.gauge("store_restored_bytes", **labels)
        self._rate = metrics.gauge("store_restore_rate_bytes_per_second", **labels)
        self._duration = metrics.timer("store_restore_duration", **labels)
        self._records.set(0)
        self._bytes.set(0)
        if records_expected is not None:
            metrics.gauge("store_restore_expected_records", **labels).set(records_expected)
        if bytes_expected is not None:
            metrics.gauge("store_restore_expected_bytes", **labels).set(bytes_expected)

    def advance(self, records: int = 0, size: int = 0) -> None:
        """``records`` more records, or ``size`` more bytes, are restored; logs when a line is due."""
        with self._lock:
            self.records += records
            self.bytes += size
            now = self._clock()
            self._records.set(self.records)
            self._bytes.set(self.bytes)
            self._rate.set(self._rate_at(now))
            if now < self._next_log:
                return
            self._next_log = now + self._log_interval
            line = self.describe(now)
        self._logger.info("restoring store %s of task %s: %s", self.store, self.task, line)

    def finish(self) -> float:
        """The restore ended: record its duration (returned, in seconds)."""
        with self._lock:
            now = self._clock()
            elapsed = now - self._started
            self._rate.set(self._rate_at(now))
        self._duration.update(elapsed)
        return elapsed

    def describe(self, now: float | None = None) -> str:
        """``1.2 GB / 4.0 GB, 85.0 MB/s`` (bytes known) or ``1,200 / 4,000 records, 1.1 MB, 85.0 MB/s``."""
        rate = f"{human_bytes(self._rate_at(self._clock() if now is None else now))}/s"
        if self.bytes_expected is not None:
            return f"{human_bytes(self.bytes)} / {human_bytes(self.bytes_expected)}, {rate}"
        expected = f" / {self.records_expected:,}" if self.records_expected is not None else ""
        return f"{self.records:,}{expected} records, {human_bytes(self.bytes)}, {rate}"

    def _rate_at(self, now: float) -> float:
        elapsed = now - self._started
        return self.bytes / elapsed if elapsed > 0 else 0.0
