"""The container's adjunct loop: reads the adjunct partitions with consumers of its own and stores
every message through the manager, first to catch up (bootstrap), then beside the tasks on a thread.

Bootstrap runs on the container's thread before any task starts: it reads until every partition of a
bootstrap input reached the newest offset it had at startup (or its end, or waits at an end-of-version
marker for the other partitions). Afterwards the loop keeps the stores current on its own thread, so a
slow task never delays updates, and commits them every ``task.commit.ms`` (flush, then record where to
resume). A failure on that thread stops the container at its next stop check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from millstream.adjunct.manager import AdjunctDataStoreManager
from millstream.contracts.metrics import Measurement
from millstream.contracts.systems import SystemAdmin, SystemStreamPartitionMetadata
from millstream.model import SystemStreamPartition
from millstream.systems.consumers import SystemConsumers

log = logging.getLogger(__name__)

MAINTAIN_INTERVAL_S = 0.5


class AdjunctLoop:
    def __init__(
        self,
        manager: AdjunctDataStoreManager,
        consumers: SystemConsumers,
        starts: Mapping[SystemStreamPartition, str],
        metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata],
        admins: Mapping[str, SystemAdmin],
        *,
        commit_ms: int,
        poll_interval_ms: int,
    ) -> None:
        self.manager = manager
        self.consumers = consumers
        self.admins = admins
        self.commit_s = commit_ms / 1000 if commit_ms > 0 else 60.0
        self.poll_timeout = max(poll_interval_ms, 1) / 1000
        self.active = set(starts)
        self.pending: dict[SystemStreamPartition, list[Any]] = {}
        self.stored = 0
        self._targets: dict[SystemStreamPartition, str] = {}
        """Bootstrap partitions not caught up yet: the newest offset they had at startup."""
        for ssp in manager.bootstrap_ssps:
            newest = metadata[ssp].newest_offset
            order = None if newest is None else admins[ssp.system].offset_comparator(starts[ssp], newest)
            if newest is not None and (order is None or order <= 0):
                self._targets[ssp] = newest
        self._remaining = {ssp: _distance(starts[ssp], target, inclusive=True) for ssp, target in self._targets.items()}
        """Bootstrap partition → messages still to read before it caught up (when offsets are numbers)."""
        self._versions_shown: dict[tuple[str, str], str] = {}
        self.bootstrapping = False
        self.bootstrap_seconds = 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._next_commit = time.monotonic() + self.commit_s
        self._next_maintain = time.monotonic() + MAINTAIN_INTERVAL_S

    # --- bootstrap, on the container's thread ----------------------------------------------------

    @property
    def caught_up(self) -> bool:
        return not (self._targets.keys() - self.manager.held())

    def bootstrap(self, stop_requested: Callable[[], bool], check_every_s: float = 0.5) -> bool:
        """Read until every bootstrap partition caught up; False when a stop came first."""
        if not self._targets:
            return True
        started = time.monotonic()
        log.info("adjunct stores: bootstrapping %d partition(s) before processing", len(self._targets))
        next_check = started + check_every_s
        self.bootstrapping = True
        while not self.caught_up:
            self.step()
            if time.monotonic() >= next_check:
                if stop_requested():
                    return False
                next_check = time.monotonic() + check_every_s
        self.manager.commit()
        self.bootstrapping = False
        self.bootstrap_seconds = time.monotonic() - started
        log.info("adjunct stores: bootstrapped %d message(s) in %.2fs", self.stored, self.bootstrap_seconds)
        return True

    # --- one pass ---------------------------------------------------------------------------------

    def step(self) -> None:
        held = self.manager.held()
        for ssp in [ssp for ssp in self.pending if ssp not in held]:
            self._process(ssp, self.pending.pop(ssp))
        pollable = self.active - self.pending.keys() - held
        if pollable:
            batches = self.consumers.poll(pollable, 0.0 if self.pending else self.poll_timeout)
            for ssp, batch in batches.items():
                if batch:
                    self._process(ssp, batch)
        elif self.active:
            time.sleep(self.poll_timeout)
        now = time.monotonic()
        if now >= self._next_commit:
            self.manager.commit()
            self._next_commit = time.monotonic() + self.commit_s
        if now >= self._next_maintain:
            self.manager.maintain()
            self._next_maintain = time.monotonic() + MAINTAIN_INTERVAL_S

    def _process(self, ssp: SystemStreamPartition, batch: list[Any]) -> None:
        end_of_stream = batch[-1].is_end_of_stream
        messages = batch[:-1] if end_of_stream else batch
        consumed = self.manager.process_batch(ssp, messages) if messages else 0
        self.stored += consumed
        if consumed < len(messages):
            self.pending[ssp] = batch[consumed:]
        elif end_of_stream:
            self.active.discard(ssp)
            self._targets.pop(ssp, None)
            log.info("adjunct partition %s reached its end", ssp)
        target = self._targets.get(ssp)
        if target is not None and consumed:
            last = messages[consumed - 1].offset
            self._remaining[ssp] = _distance(last, target, inclusive=False)
            order = self.admins[ssp.system].offset_comparator(last, target)
            if order is None or order >= 0:
                del self._targets[ssp]
                self._remaining[ssp] = 0

    # --- what the container's metrics read, on the reporter's thread -------------------------------

    def measurements(self) -> list[Measurement]:
        """Bootstrap progress (messages still to read per bootstrap partition, whether it runs, how long
        it took), messages stored, and each store's serving version as an info gauge: 1 for the version
        serving, 0 for the one it replaced."""
        values: list[Measurement] = [
            ("adjunct_bootstrapping", "gauge", {}, float(self.bootstrapping)),
            ("adjunct_bootstrap_duration_seconds", "gauge", {}, self.bootstrap_seconds),
            ("adjunct_stored_messages", "counter", {}, self.stored),
        ]
        for ssp, remaining in dict(self._remaining).items():
            if remaining is not None:
                labels = {"system": ssp.system, "stream": ssp.stream, "partition": str(ssp.partition)}
                values.append(("adjunct_bootstrap_remaining_messages", "gauge", labels, remaining))
        for (store, owner), version in self.manager.serving_versions().items():
            shown = self._versions_shown.get((store, owner))
            if version is None or version == shown:
                continue
            store_labels = {"store": store, "owner": owner}
            if shown is not None:
                values.append(("adjunct_serving_version", "gauge", {**store_labels, "version": shown}, 0))
            values.append(("adjunct_serving_version", "gauge", {**store_labels, "version": version}, 1))
            self._versions_shown[(store, owner)] = version
        return values

    # --- beside the tasks, on a thread ------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="adjunct-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.step()
        except BaseException as error:  # raised on the container's thread by raise_if_failed
            log.error("adjunct loop failed: %s: %s", type(error).__name__, error)
            self._failure = error

    def raise_if_failed(self) -> None:
        if self._failure is not None:
            raise self._failure

    def stop(self) -> None:
        """Stop reading and commit what was stored (on the caller's thread once the loop ended)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._failure is None:
            self.manager.commit()


def _distance(offset: str, target: str, inclusive: bool) -> int | None:
    """Messages from ``offset`` (itself included or not) through ``target``; None when offsets are not
    numbers (Kinesis sequence numbers)."""
    try:
        return max(0, int(target) - int(offset) + (1 if inclusive else 0))
    except ValueError:
        return None
