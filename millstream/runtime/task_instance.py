"""One task of a container: the user's task object, its partitions, offsets and commits.

Commit order is what makes output at-least-once: producers are flushed first, and only then are the
offsets of the processed messages checkpointed. A crash between the two re-processes messages whose
output may already exist; it never checkpoints input whose output was lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from millstream.api.task import (
    CheckpointListener,
    ClosableTask,
    EndOfStreamListenerTask,
    InitableTask,
    PartitionEndOfStreamListenerTask,
    WindowableTask,
)
from millstream.checkpoint.base import CheckpointManager
from millstream.checkpoint.checkpoint import CheckpointV1
from millstream.config import Config
from millstream.errors import MillstreamError
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.runtime.collector import ProducerPool, TaskCollector
from millstream.startpoint.manager import StartpointManager

log = logging.getLogger(__name__)


class ReadableCoordinator:
    """The ``TaskCoordinator`` handed to a task; the run loop reads the requests after each call."""

    __slots__ = ("commit_requested", "ended", "requested", "shutdown_requested")

    def __init__(self) -> None:
        self.requested = False
        self.commit_requested = False
        self.shutdown_requested = False
        self.ended: list[SystemStreamPartition] = []

    def commit(self) -> None:
        self.commit_requested = self.requested = True

    def shutdown(self) -> None:
        """Commit and stop every task of this container (Samza's ALL_TASKS_IN_CONTAINER scope)."""
        self.shutdown_requested = self.requested = True

    def end_of_stream(self, ssp: SystemStreamPartition) -> None:
        """The task declares ``ssp`` finished (an intermediate partition whose producers all ended)."""
        self.ended.append(ssp)
        self.requested = True

    def clear(self) -> None:
        self.requested = self.commit_requested = False
        self.ended = []


@dataclass
class ContainerContext:
    """The ``TaskContext`` given to ``InitableTask.init``."""

    task_name: TaskName
    config: Config
    system_stream_partitions: frozenset[SystemStreamPartition]
    container_id: str
    stores: Mapping[str, Any] = field(default_factory=dict)

    def get_store(self, name: str) -> Any:
        try:
            return self.stores[name]
        except KeyError:
            raise MillstreamError(f"task '{self.task_name}' has no store '{name}'") from None


class AppliedStartpoints:
    """The startpoints a task started from, deleted once a commit follows a processed message.

    Deleting only then (SAMZA-2749) means a crash before that commit applies them again, and a
    partition that stays idle keeps its startpoint across commits and restarts.
    """

    def __init__(self, manager: StartpointManager, task_name: TaskName, ssps: set[SystemStreamPartition]) -> None:
        self.manager = manager
        self.task_name = task_name
        self.pending = set(ssps)

    def committed(self, updated: set[SystemStreamPartition]) -> None:
        done = self.pending & updated
        if done:
            self.manager.remove_fan_out_for_task_ssps(self.task_name, done)
            self.pending -= done
            log.info("%s: startpoints of %s applied and removed", self.task_name, sorted(s.key() for s in done))


class TaskInstance:
    def __init__(
        self,
        task_name: TaskName,
        task: Any,
        ssps: frozenset[SystemStreamPartition],
        context: ContainerContext,
        producers: ProducerPool,
        collector: TaskCollector,
        checkpoint_manager: CheckpointManager,
        checkpointed: Mapping[SystemStreamPartition, str | None],
        catch_up_from: Mapping[SystemStreamPartition, tuple[str, Callable[[str, str], int | None]]],
        startpoints: AppliedStartpoints | None = None,
    ) -> None:
        self.task_name = task_name
        self.task = task
        self.ssps = ssps
        self.context = context
        self.producers = producers
        self.collector = collector
        self.coordinator = ReadableCoordinator()
        self.checkpoint_manager = checkpoint_manager
        self.last_processed: dict[SystemStreamPartition, str] = {
            ssp: offset for ssp, offset in checkpointed.items() if offset is not None and ssp in ssps
        }
        self._last_written = dict(self.last_processed)
        self._catch_up = dict(catch_up_from)
        """SSPs shared with tasks that start earlier (broadcast): skip envelopes before our own start."""
        self.end_of_stream: set[SystemStreamPartition] = set()
        self.finished = False
        self.shutdown_requested = False
        """The task called ``coordinator.shutdown()``: the whole container commits and stops."""
        self.processed = 0
        self.commits = 0
        self._windowable = isinstance(task, WindowableTask)
        self.startpoints = startpoints
        self._updated: set[SystemStreamPartition] = set()
        """Partitions that processed a message (or reached end-of-stream) since start."""

    def init(self) -> None:
        if isinstance(self.task, InitableTask):
            self.task.init(self.context)

    def process(
        self, ssp: SystemStreamPartition, batch: list[IncomingMessageEnvelope], deadline: float = float("inf")
    ) -> int:
        """Process a batch of one partition in order; returns how many envelopes it consumed.

        Stops early when the task asks to shut down, or at ``deadline`` (``time.monotonic``) so the
        run loop can serve its timers; the caller hands the rest back later.
        """
        skipped = 0
        if ssp in self._catch_up:
            skipped = self._skip_before_start(ssp, batch)
        process = self.task.process
        collector = self.collector
        coordinator = self.coordinator
        last = self.last_processed
        monotonic = time.monotonic
        count = 0
        for envelope in batch[skipped:] if skipped else batch:
            process(envelope, collector, coordinator)
            last[ssp] = envelope.offset
            count += 1
            if coordinator.requested and self._handle_requests():
                break
            if monotonic() >= deadline:
                break
        if count:
            self._updated.add(ssp)
        self.processed += count
        return skipped + count

    def window(self) -> None:
        if self._windowable and not self.finished:
            self.task.window(self.collector, self.coordinator)
            if self.coordinator.requested:
                self._handle_requests()

    def mark_end_of_stream(self, ssp: SystemStreamPartition) -> None:
        """Record that ``ssp`` is exhausted; once all are, notify the task, commit and finish."""
        first = ssp not in self.end_of_stream
        self.end_of_stream.add(ssp)
        self._updated.add(ssp)
        if first and not self.finished and isinstance(self.task, PartitionEndOfStreamListenerTask):
            self.task.on_partition_end_of_stream(ssp, self.collector, self.coordinator)
            if self.coordinator.requested:
                self._handle_requests()
        if self.finished or not self.end_of_stream >= self.ssps:
            return
        if isinstance(self.task, EndOfStreamListenerTask):
            self.task.on_end_of_stream(self.collector, self.coordinator)
        self.commit()
        self.finished = True

    def commit(self) -> None:
        """Flush this task's output, then checkpoint the offsets it processed (only if they moved);
        then drop the startpoints this commit made obsolete."""
        self.producers.flush(self.task_name)
        if isinstance(self.task, CheckpointListener):
            self.task.before_checkpoint()
        if self.last_processed != self._last_written:
            offsets = dict(self.last_processed)
            self.checkpoint_manager.write_checkpoint(self.task_name, CheckpointV1(offsets))
            self._last_written = offsets
            self.commits += 1
        if self.startpoints is not None and self.startpoints.pending:
            self.startpoints.committed(self._updated)

    def close(self) -> None:
        if isinstance(self.task, ClosableTask):
            self.task.close()

    def _handle_requests(self) -> bool:
        """Serve the task's commit/shutdown request; True when this task must stop processing."""
        coordinator = self.coordinator
        stop = coordinator.shutdown_requested
        if coordinator.commit_requested or stop:
            self.commit()
        ended = coordinator.ended
        coordinator.clear()
        for ssp in ended:
            self.mark_end_of_stream(ssp)
        if stop:
            self.finished = self.shutdown_requested = True
        return stop or self.finished

    def _skip_before_start(self, ssp: SystemStreamPartition, batch: list[IncomingMessageEnvelope]) -> int:
        """How many leading envelopes precede this task's own start offset (a shared, earlier-registered SSP)."""
        start, compare = self._catch_up[ssp]
        for index, envelope in enumerate(batch):
            order = compare(envelope.offset, start)
            if order is None or order >= 0:
                del self._catch_up[ssp]
                return index
        return len(batch)
