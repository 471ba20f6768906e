"""One task of a container: the user's task object, its partitions, offsets, stores and commits.

Commit order is what makes output at-least-once and state transactional: the stores' object caches
write back what they hold dirty, producers are flushed (output and changelogs), the task's
``before_checkpoint`` runs (what it writes to a store is written back and flushed to the changelog too,
so it is part of this commit), the stores are snapshotted (the checkpoint directories and the backends'
markers), their snapshots uploaded (asynchronously, on a commit thread, while the task keeps processing), and
only then are the checkpoints written — input offsets with the markers of exactly the state those offsets
produced — and what they no longer need cleaned up. A crash anywhere re-processes from the last durable
checkpoint, with the stores restored to the state it names.

With ``task.commit.snapshot.beside.processing.enabled``, only the commit's cut pauses processing when the task has
no stores, or every store of the task has an object cache (the default) and backups: ``before_checkpoint``, the
offsets, and the caches' dirty entries taken (``TaskStorage.hold``). The write-back of those entries, the
producers' flush, the RocksDB flush and checkpoint directory and the backends' snapshot then run on the commit
thread with the upload, while the task processes on; its writes stay in the caches until the snapshot is made, so
the snapshot still holds exactly the state of the cut's offsets. Without an object cache on every store (a store
that writes through, such as the high-level engine's operator store), the flush and snapshot run on the task's
thread, exclusive with processing.

One commit is in flight per task. A commit due while the previous one still uploads is skipped while
that one started less than ``task.commit.max.delay.ms`` ago; past that, processing blocks until it
ends, and fails after ``task.commit.timeout.ms``. A skipped commit is owed: the run loop makes it as soon
as the upload ended (``commit_if_owed``), not at the next ``task.commit.ms``, because what the task asked
to flush (end-of-stream on intermediate streams, a finished task's last output) may be what the job waits
for to end. A failed asynchronous stage fails the next commit
(and so the container) with its cause. A task without stores has only offsets in its cut: the flush and the
checkpoint run on the commit thread (synchronously when it has no commit executor, as in tests).

Under exactly-once (``transaction``) commits are synchronous and container-wide: a task's commit appends
its checkpoints to the container's open Kafka transaction, and what must follow a durable checkpoint
(startpoints, purges, cleanup) waits until that transaction committed (``runtime/transaction.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from millstream.api.remote_table import RemoteTable
from millstream.api.task import (
    AsyncStreamTask,
    BatchStreamTask,
    CheckpointListener,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    InitableTask,
    MessageCollector,
    PartitionDrainListenerTask,
    PartitionEndOfStreamListenerTask,
    WindowableTask,
)
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.checkpoint.offset_manager import count_before
from millstream.checkpoint.purge import CommittedMessagePurger
from millstream.config import Config
from millstream.config.views import TaskConfig
from millstream.errors import MillstreamError
from millstream.log_context import in_task_log_context
from millstream.metrics.registry import NOOP_METRICS, MetricsRegistry
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.runtime.async_tasks import AsyncProcessor, run_hook
from millstream.runtime.process_errors import ProcessErrorPolicy, TaskCallbackError
from millstream.runtime.seams import CheckpointWriter, OutputFlusher, PendingStartpoints, TaskMeter, TaskStorage
from millstream.runtime.transaction import ContainerTransaction
from millstream.startpoint.manager import StartpointManager
from millstream.storage.errors import CommitFailedError, CommitTimeoutError
from millstream.table.provider import TableProvider
from millstream.table.remote import RemoteTableInstance

if TYPE_CHECKING:
    from millstream.runtime.services import ContainerServices

log = logging.getLogger(__name__)


class ReadableCoordinator:
    """The ``TaskCoordinator`` handed to a task; the run loop reads the requests after each call."""

    __slots__ = ("commit_requested", "drained_ssps", "ended", "requested", "shutdown_requested")

    def __init__(self) -> None:
        self.requested = False
        self.commit_requested = False
        self.shutdown_requested = False
        self.ended: list[SystemStreamPartition] = []
        self.drained_ssps: list[SystemStreamPartition] = []

    def commit(self) -> None:
        self.commit_requested = self.requested = True

    def shutdown(self) -> None:
        """Commit and stop every task of this container (Samza's ALL_TASKS_IN_CONTAINER scope)."""
        self.shutdown_requested = self.requested = True

    def end_of_stream(self, ssp: SystemStreamPartition) -> None:
        """The task declares ``ssp`` finished (an intermediate partition whose producers all ended)."""
        self.ended.append(ssp)
        self.requested = True

    def drained(self, ssp: SystemStreamPartition) -> None:
        """The task declares ``ssp`` drained (an intermediate partition whose producers all drained)."""
        self.drained_ssps.append(ssp)
        self.requested = True

    def clear(self) -> None:
        self.requested = self.commit_requested = False
        self.ended = []
        self.drained_ssps = []


@dataclass
class ContainerContext:
    """The ``TaskContext`` given to ``InitableTask.init``."""

    task_name: TaskName
    config: Config
    system_stream_partitions: frozenset[SystemStreamPartition]
    container_id: str
    stores: Mapping[str, Any] = field(default_factory=dict)
    repositioned: frozenset[SystemStreamPartition] = frozenset()
    """Partitions that start elsewhere than after their checkpoint (a startpoint, ``reset.offset``)."""
    unavailable: Mapping[str, str] = field(default_factory=dict)
    """Stores of the job this task has none of: the error that says why (an adjunct input without a
    partition for this task)."""
    metrics: MetricsRegistry = NOOP_METRICS
    """The task's own metrics (``context.metrics.counter("enriched").inc()``); no-ops when metrics are off."""
    tables: TableProvider | None = None
    """The container's remote tables, shared by its tasks."""
    services: ContainerServices | None = None
    """The container's services (admins, metadata store, serdes): what the operator graph is wired with."""

    def get_store(self, name: str) -> Any:
        try:
            return self.stores[name]
        except KeyError:
            message = self.unavailable.get(name) or f"task '{self.task_name}' has no store '{name}'"
            raise MillstreamError(message) from None

    def get_table(self, table: str | RemoteTable) -> RemoteTableInstance:
        if self.tables is None:
            self.tables = TableProvider(self.config)
        return self.tables.get(table)


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


@dataclass(frozen=True)
class CommitSettings:
    """The commit rules of ``task.*`` (see the module docstring)."""

    max_delay_ms: int = 60_000
    timeout_ms: int = 1_800_000
    write_versions: tuple[int, ...] = (1, 2)
    pause: Callable[[str], None] = field(default=lambda point: None, compare=False)
    """Testing hook at the commit points (``storage.faults``)."""
    skip_during_failures: bool = False
    max_skipped_exceptions: int = 5
    max_skipped_timeouts: int = 2
    beside_processing: bool = False
    """``task.commit.snapshot.beside.processing.enabled``: the commit's flush, snapshot and checkpoint on the
    commit thread, only the cut on the task's thread."""

    @classmethod
    def of(cls, config: Config, pause: Callable[[str], None] | None = None) -> CommitSettings:
        task = TaskConfig.of(config)
        return cls(
            task.commit_max_delay_ms,
            task.commit_timeout_ms,
            tuple(task.checkpoint_write_versions),
            pause or (lambda point: None),
            task.commit_skip_during_failures,
            task.commit_skip_exception_max_limit,
            task.commit_skip_timeout_max_limit,
            task.commit_snapshot_beside_processing,
        )


class TaskInstance:
    def __init__(
        self,
        task_name: TaskName,
        task: Any,
        ssps: frozenset[SystemStreamPartition],
        context: ContainerContext,
        producers: OutputFlusher,
        collector: MessageCollector,
        checkpoint_manager: CheckpointWriter,
        checkpointed: Mapping[SystemStreamPartition, str | None],
        catch_up_from: Mapping[SystemStreamPartition, tuple[str, Callable[[str, str], int | None]]],
        startpoints: PendingStartpoints | None = None,
        *,
        storage: TaskStorage | None = None,
        commit_settings: CommitSettings | None = None,
        commit_executor: Executor | None = None,
        purger: CommittedMessagePurger | None = None,
        process_errors: ProcessErrorPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        meters: TaskMeter | None = None,
        transaction: ContainerTransaction | None = None,
    ) -> None:
        """``transaction``: exactly-once, the container's commit of all its tasks in one transaction (a commit of
        this task is one of all; what must follow a durable checkpoint waits for the transaction to commit)."""
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
        """Partitions no longer read: they reached end-of-stream or drained."""
        self.drained: set[SystemStreamPartition] = set()
        """Partitions drained in this run (``mark_drained``)."""
        self.finished = False
        self.shutdown_requested = False
        """The task called ``coordinator.shutdown()``: the whole container commits and stops."""
        self.processed = 0
        self.commits = 0
        self._windowable = isinstance(task, WindowableTask)
        self._process_batch_call = task.process_batch if isinstance(task, BatchStreamTask) else None
        """A ``BatchStreamTask`` takes each partition's batch whole."""
        self.startpoints = startpoints
        self._updated: set[SystemStreamPartition] = set()
        """Partitions that processed a message (or reached end-of-stream) since start."""
        self.storage = storage
        self.commit_settings = commit_settings or CommitSettings()
        self._resumes_from_v2 = storage is not None and not storage.restorable_from_v1
        """The task resumes from its last V2 checkpoint (see ``_write_order``)."""
        self.commit_executor = commit_executor
        self.purger = purger
        self.process_errors = process_errors or ProcessErrorPolicy()
        self._clock = clock
        self._snapshotted = dict(self.last_processed)
        """The offsets of the last commit's snapshot (its checkpoint may still be on its way)."""
        self._in_flight: Future[None] | None = None
        self._in_flight_id: CheckpointId | None = None
        self._commit_started = 0.0
        self._commit_failure: tuple[CheckpointId, BaseException] | None = None
        self.commits_skipped = 0
        self.commit_owed = False
        """A commit was skipped while one uploaded: ``commit_if_owed`` makes it once the upload ended."""
        self.commits_blocked = 0
        self.commits_timed_out = 0
        """Blocked commits that gave up waiting and were skipped (``task.commit.skip.commit.*``)."""
        self.commit_failures_skipped = 0
        """Failed commits tolerated (``task.commit.skip.commit.*``); the next commit covers their offsets."""
        self.last_checkpoint: Checkpoint | None = None
        self.meters = meters
        """The task's runtime metrics; None when metrics are off, so the hot path checks one local."""
        self.transaction = transaction
        self.async_processor = self._async_processor()

    def _async_processor(self) -> AsyncProcessor | None:
        """An ``AsyncStreamTask``'s messages in flight (``runtime/async_tasks.py``); None for any other task."""
        task = self.task
        if not isinstance(task, AsyncStreamTask):
            return None
        config = TaskConfig.of(self.context.config)
        return AsyncProcessor(
            self.task_name, task, self.collector, self.coordinator, self.process_errors, config, self._released
        )

    @in_task_log_context
    def init(self) -> None:
        if isinstance(self.task, InitableTask):
            try:
                run_hook(self.task.init(self.context))
            except MillstreamError:
                raise  # names what is at fault already
            except Exception as error:  # no policy can go on without the task: fail naming it
                raise TaskCallbackError(self.task_name, "init()", error) from error

    @in_task_log_context
    def process(
        self, ssp: SystemStreamPartition, batch: list[IncomingMessageEnvelope], deadline: float = float("inf")
    ) -> int:
        """Process a batch of one partition in order; returns how many envelopes it consumed.

        Stops early when the task asks to shut down, or at ``deadline`` (on this task's clock, the one
        the run loop's timers run on, read in strides while messages are fast: ``_next_stride``) so the
        run loop can serve its timers; the caller hands the rest back later. The partition's offset is
        recorded once, after the loop, for the last message processed; a request from the task (a
        commit) records it at once, so the commit covers it.
        """
        skipped = 0
        if ssp in self._catch_up:
            skipped = self._skip_before_start(ssp, batch)
        messages = batch[skipped:] if skipped else batch
        clock = self._clock
        meters = self.meters
        began = clock() if meters is not None else 0.0
        if self.async_processor is not None:
            count = self._process_async(messages, deadline)
        elif self._process_batch_call is not None:
            count = self._process_batch(ssp, messages)
        else:
            count = self._process_each(ssp, messages, deadline)
        if meters is not None and count:
            meters.batch(ssp, messages[:count], clock() - began)
        self.processed += count
        return skipped + count

    def _process_each(
        self, ssp: SystemStreamPartition, messages: list[IncomingMessageEnvelope], deadline: float
    ) -> int:
        process = self.task.process
        collector = self.collector
        coordinator = self.coordinator
        clock = self._clock
        count = 0
        check_at, stride, checked = 1, 1, clock()  # the clock is read at message ``check_at`` (``_next_stride``)
        try:
            for envelope in messages:
                try:
                    process(envelope, collector, coordinator)
                except Exception as error:  # the policy raises, or lets processing go on past this message
                    self.process_errors.on_process_error(self.task_name, envelope, error)
                count += 1
                if coordinator.requested:
                    self.last_processed[ssp] = envelope.offset  # a commit the task requests covers this message
                    self._updated.add(ssp)  # and its startpoint goes
                    if self._handle_requests() or ssp in self.end_of_stream:
                        break  # nothing past the message that ended or drained the partition is read
                if count >= check_at:
                    now = clock()
                    if now >= deadline:
                        break
                    stride = _next_stride(stride, now - checked)
                    check_at, checked = count + stride, now
        finally:
            if count:  # the offset of the last message processed, once per batch (also when the policy raised)
                self.last_processed[ssp] = messages[count - 1].offset
                self._updated.add(ssp)
        return count

    def _process_async(self, messages: list[IncomingMessageEnvelope], deadline: float) -> int:
        """Start the messages on the container's loop (``AsyncProcessor``); their offsets are recorded as
        they are released (``_released``), and a request a completed message made is served here."""
        processor = self.async_processor
        assert processor is not None
        count = processor.submit(messages, deadline, self._clock)
        self.serve_async_requests()
        return count

    def _released(self, ssp: SystemStreamPartition, offset: str) -> None:
        """The completed prefix of ``ssp`` now ends at ``offset``: what a commit may checkpoint."""
        self.last_processed[ssp] = offset
        self._updated.add(ssp)

    def harvest_async(self) -> None:
        """The run loop drove the event loop: release what completed and serve what it asked for."""
        processor = self.async_processor
        if processor is not None and processor.done:
            processor.harvest()
            self.serve_async_requests()

    def serve_async_requests(self) -> None:
        if self.coordinator.requested and not self.finished:
            self._handle_requests()

    def settle_async(self) -> None:
        """Wait for the messages in flight (before ``window()``, end-of-stream, drain and the last commit)."""
        processor = self.async_processor
        if processor is not None and (processor.in_flight or processor.done):
            processor.settle()

    def _process_batch(self, ssp: SystemStreamPartition, messages: list[IncomingMessageEnvelope]) -> int:
        """A ``BatchStreamTask`` takes the batch whole: no deadline cuts it (a batch is one poll's worth),
        and a request it makes is served once the batch is done, covering all of it."""
        process_batch = self._process_batch_call
        if not messages or process_batch is None:
            return 0
        try:
            process_batch(messages, self.collector, self.coordinator)
        except Exception as error:  # the policy raises, or lets processing go on past the whole batch
            self.process_errors.on_batch_error(self.task_name, messages, error)
        self.last_processed[ssp] = messages[-1].offset
        self._updated.add(ssp)
        if self.coordinator.requested:
            self._handle_requests()
        return len(messages)

    @in_task_log_context
    def window(self) -> None:
        if self._windowable and not self.finished:
            self.settle_async()
            try:
                run_hook(self.task.window(self.collector, self.coordinator))
            except Exception as error:
                self.process_errors.on_window_error(self.task_name, error)
            if self.coordinator.requested:
                self._handle_requests()

    def mark_end_of_stream(self, ssp: SystemStreamPartition) -> None:
        """Record that ``ssp`` is exhausted; once all are, notify the task, commit and finish."""
        self.settle_async()
        first = ssp not in self.end_of_stream
        self.end_of_stream.add(ssp)
        self._updated.add(ssp)
        if first and not self.finished and isinstance(self.task, PartitionEndOfStreamListenerTask):
            run_hook(self.task.on_partition_end_of_stream(ssp, self.collector, self.coordinator))
            if self.coordinator.requested:
                self._handle_requests()
        self._finish_when_all_done()

    def mark_drained(self, ssp: SystemStreamPartition) -> None:
        """The job drains: ``ssp`` is read no further in this run. Once every partition drained or ended,
        ``on_drain``, commit and finish; nothing of the drain is final (the next run reads on)."""
        if ssp in self.end_of_stream or ssp not in self.ssps:
            return
        self.settle_async()
        self.end_of_stream.add(ssp)
        self.drained.add(ssp)
        if not self.finished and isinstance(self.task, PartitionDrainListenerTask):
            run_hook(self.task.on_partition_drain(ssp, self.collector, self.coordinator))
            if self.coordinator.requested:
                self._handle_requests()
        self._finish_when_all_done()

    def _finish_when_all_done(self) -> None:
        if self.finished or not self.end_of_stream >= self.ssps:
            return
        if self.drained and isinstance(self.task, DrainListenerTask):
            run_hook(self.task.on_drain(self.collector, self.coordinator))
        elif not self.drained and isinstance(self.task, EndOfStreamListenerTask):
            run_hook(self.task.on_end_of_stream(self.collector, self.coordinator))
        self.commit()
        self.finished = True

    @in_task_log_context
    def commit(self) -> None:
        """Flush this task's output, snapshot its stores, then (asynchronously when it has backups)
        upload them, checkpoint the offsets it processed and clean up; only when the offsets moved
        or a store changed. Then drop the startpoints this commit made obsolete. Under exactly-once, the whole
        container commits in one transaction (``ContainerTransaction``). An ``AsyncStreamTask``'s messages in
        flight go on: the offsets (``_released``) and output (held until release) cover the completed prefix."""
        transaction = self.transaction
        if transaction is not None and not transaction.committing:
            transaction.commit()
            return
        self._raise_commit_failure()
        in_flight = self._in_flight
        if in_flight is not None and not in_flight.done():
            delay_ms = (self._clock() - self._commit_started) * 1000
            if delay_ms < self.commit_settings.max_delay_ms:
                self.commits_skipped += 1
                self.commit_owed = True
                log.debug("%s: commit skipped, commit %s still uploading", self.task_name, self._in_flight_id)
                return
            self.commits_blocked += 1
            log.warning(
                "%s: commit %s still uploading after %.0f ms (task.commit.max.delay.ms=%d): processing waits for it",
                self.task_name, self._in_flight_id, delay_ms, self.commit_settings.max_delay_ms,
            )  # fmt: skip
            if not self._wait_for_commit(tolerate_timeout=True):
                return  # tolerated: the upload goes on, and the next commit waits for it again
            self._raise_commit_failure()
        self.commit_owed = False
        storage = self.storage
        started = self._clock()
        if self._snapshots_beside_processing():
            self._commit_beside_processing(started)
            return
        if storage is not None:
            storage.write_back()  # the stores' cached writes join the changelog before the flush
        self.producers.flush(self.task_name)
        if isinstance(self.task, CheckpointListener):
            self.task.before_checkpoint()
            if storage is not None and storage.dirty:
                storage.write_back()
                self.producers.flush(self.task_name)  # the listener's store writes reach their changelog
        if self.last_processed == self._snapshotted and not (storage is not None and storage.dirty):
            if self.startpoints is not None and self.startpoints.pending:
                self.startpoints.committed(self._updated)
            return
        checkpoint_id = CheckpointId.create()
        offsets = dict(self.last_processed)
        updated = set(self._updated)
        phase = self._timed("flush", started)
        self.commit_settings.pause("before-snapshot")
        try:
            markers = storage.snapshot(checkpoint_id) if storage is not None else {}
        except Exception as error:  # under the commit-failure policy, as a failed upload or checkpoint write
            self._commit_failure = (checkpoint_id, error)
            self._raise_commit_failure()
            return
        self._timed("snapshot", phase)
        self._snapshotted = offsets
        self._commit_started = started
        self.commit_settings.pause("after-snapshot")
        if storage is not None and storage.has_backups and self.commit_executor is not None:
            self._in_flight_id = checkpoint_id
            self._in_flight = self.commit_executor.submit(
                self._complete_commit_recording_failure, checkpoint_id, offsets, markers, updated
            )
        else:
            self._complete_commit(checkpoint_id, offsets, markers, updated)

    def _snapshots_beside_processing(self) -> bool:
        """Whether this commit's flush, snapshot and checkpoint may run on the commit thread: it is enabled
        (``task.commit.snapshot.beside.processing.enabled``), the container gave the task one, no container
        transaction needs the commit on this thread, and the task has no stores or
        every store can hold the task's writes meanwhile (an object cache) and has backups."""
        storage = self.storage
        if not self.commit_settings.beside_processing or self.commit_executor is None or self.transaction is not None:
            return False
        return storage is None or (storage.has_backups and storage.can_hold)

    def _commit_beside_processing(self, started: float) -> None:
        """The commit's cut on the task's thread, everything else on the commit thread (``_snapshot_and_complete``).

        The cut is ``before_checkpoint`` (after a flush of the task's output on this thread, as its contract says:
        the high-level engine's aggregated control messages rely on it), the input offsets, and the stores' cached
        writes so far, taken by ``storage.hold``; later writes stay in the stores' caches until the snapshot is
        made, so it names exactly the state the offsets produced while the task goes on processing. Output sent
        before the cut is flushed before the snapshot and the checkpoint (the flush may cover later output too,
        which is harmless)."""
        storage = self.storage
        executor = self.commit_executor
        assert executor is not None
        if isinstance(self.task, CheckpointListener):
            self.producers.flush(self.task_name)  # its contract: called once the task's output so far is durable
            self.task.before_checkpoint()
        if self.last_processed == self._snapshotted and not (storage is not None and storage.dirty):
            self.producers.flush(self.task_name)
            if self.startpoints is not None and self.startpoints.pending:
                self.startpoints.committed(self._updated)
            return
        checkpoint_id = CheckpointId.create()
        offsets = dict(self.last_processed)
        if storage is not None:
            storage.hold()
        self._snapshotted = offsets
        self._commit_started = started
        self._in_flight_id = checkpoint_id
        self._in_flight = executor.submit(self._snapshot_and_complete, checkpoint_id, offsets, set(self._updated))

    def _snapshot_and_complete(
        self,
        checkpoint_id: CheckpointId,
        offsets: dict[SystemStreamPartition, str],
        updated: set[SystemStreamPartition],
    ) -> None:
        """On the commit thread: the held cut's writes, the producers' flush, the snapshot, then the stores write
        back again; then upload, checkpoint and cleanup (``_complete_commit``). A failure fails the next commit."""
        storage = self.storage
        try:
            phase = self._clock()
            try:
                if storage is not None:
                    storage.write_held()
                self.producers.flush(self.task_name)
                phase = self._timed("flush", phase)
                self.commit_settings.pause("before-snapshot")
                markers = storage.snapshot(checkpoint_id) if storage is not None else {}
            finally:
                if storage is not None:
                    storage.release()
            self._timed("snapshot", phase)
            self.commit_settings.pause("after-snapshot")
        except BaseException as error:  # raised by the next commit, on the task's thread
            log.error("%s: commit %s failed: %s: %s", self.task_name, checkpoint_id, type(error).__name__, error)
            self._commit_failure = (checkpoint_id, error)
            return
        self._complete_commit_recording_failure(checkpoint_id, offsets, markers, updated)

    def commit_if_owed(self) -> None:
        """Make the commit skipped while the last one uploaded, once that upload ended. Called by the run
        loop between batches; free while nothing is owed."""
        if self.commit_owed and (self._in_flight is None or self._in_flight.done()):
            self.commit()

    def _complete_commit_recording_failure(
        self,
        checkpoint_id: CheckpointId,
        offsets: dict[SystemStreamPartition, str],
        markers: dict[str, dict[str, str]],
        updated: set[SystemStreamPartition],
    ) -> None:
        try:
            self._complete_commit(checkpoint_id, offsets, markers, updated)
        except BaseException as error:  # raised by the next commit, on the task's thread
            log.error("%s: commit %s failed: %s: %s", self.task_name, checkpoint_id, type(error).__name__, error)
            self._commit_failure = (checkpoint_id, error)

    def _complete_commit(
        self,
        checkpoint_id: CheckpointId,
        offsets: dict[SystemStreamPartition, str],
        markers: dict[str, dict[str, str]],
        updated: set[SystemStreamPartition],
    ) -> None:
        """Upload → write checkpoints → startpoints → cleanup: the asynchronous stage of a commit."""
        storage = self.storage
        phase = self._clock()
        uploaded = storage.upload(checkpoint_id, markers) if storage is not None else {}
        phase = self._timed("upload", phase)
        self.commit_settings.pause("after-upload")
        checkpoints: list[Checkpoint] = []
        for version in self.commit_settings.write_versions:
            if version == 1:
                v1_offsets: dict[SystemStreamPartition, str | None] = dict(offsets)
                if storage is not None:
                    v1_offsets.update(storage.changelog_offsets(checkpoint_id, uploaded))
                checkpoints.append(CheckpointV1(v1_offsets))
            else:
                checkpoints.append(CheckpointV2(checkpoint_id, offsets, uploaded))
        if storage is not None:
            storage.write_local_checkpoint(checkpoint_id, checkpoints)
        for checkpoint in self._write_order(checkpoints):
            self.checkpoint_manager.write_checkpoint(self.task_name, checkpoint)
        self._timed("checkpoint", phase)
        self._last_written = offsets
        self.last_checkpoint = checkpoints[-1] if checkpoints else None
        self.commits += 1
        if self.transaction is not None:  # durable only once the container's transaction commits
            self.transaction.after_commit(lambda: self._after_checkpoint(checkpoint_id, offsets, uploaded, updated))
        else:
            self._after_checkpoint(checkpoint_id, offsets, uploaded, updated)

    def _after_checkpoint(
        self,
        checkpoint_id: CheckpointId,
        offsets: dict[SystemStreamPartition, str],
        uploaded: dict[str, dict[str, str]],
        updated: set[SystemStreamPartition],
    ) -> None:
        """What may only follow a durable checkpoint: startpoints it applied go, intermediate records it read
        are purged, snapshots it no longer needs are cleaned up."""
        if self.startpoints is not None and self.startpoints.pending:
            self.startpoints.committed(updated)
        if self.purger is not None:
            self.purger.after_checkpoint(offsets)
        self.commit_settings.pause("after-checkpoint")
        storage = self.storage
        if storage is not None:
            phase = self._clock()
            storage.cleanup(checkpoint_id, uploaded)
            self._timed("cleanup", phase)
        if self.meters is not None:
            self.meters.committed(self._clock() - self._commit_started)

    def _write_order(self, checkpoints: list[Checkpoint]) -> list[Checkpoint]:
        """The version the task resumes from is written first: a crash between the writes then leaves that
        version the newer one, so the restart resumes from this commit instead of from the one before it
        (or, before any V2 existed, from no checkpoint at all)."""
        if not self._resumes_from_v2:
            return checkpoints
        return sorted(checkpoints, key=lambda checkpoint: checkpoint.version, reverse=True)

    def _timed(self, phase: str, since: float) -> float:
        """Record commit ``phase`` as having run from ``since`` until now; return now, where the next starts."""
        now = self._clock()
        if self.meters is not None:
            self.meters.commit_phase(phase, now - since)
        return now

    def _wait_for_commit(self, tolerate_timeout: bool = False) -> bool:
        """Wait for the commit in flight; False when it outlasted ``task.commit.timeout.ms`` and the timeout
        is tolerated (``task.commit.skip.commit.during.failures.enabled``), else that raises."""
        in_flight = self._in_flight
        if in_flight is None:
            return True
        settings = self.commit_settings
        done, _ = wait_for([in_flight], settings.timeout_ms / 1000)
        if done:
            self._in_flight = None
            return True
        what = (
            f"task '{self.task_name}': commit {self._in_flight_id} did not finish uploading within "
            f"task.commit.timeout.ms={settings.timeout_ms}"
        )
        if (
            tolerate_timeout
            and settings.skip_during_failures
            and self.commits_timed_out < settings.max_skipped_timeouts
        ):
            self.commits_timed_out += 1
            log.warning(
                "%s: commit skipped (%d of %d timeouts tolerated)",
                what,
                self.commits_timed_out,
                settings.max_skipped_timeouts,
            )
            return False
        raise CommitTimeoutError(what + _limit_reached(settings, "timeout", self.commits_timed_out))

    def _raise_commit_failure(self, tolerate: bool = True) -> None:
        """Raise the failure of the last asynchronous commit, unless it is one of the failures the
        container tolerates (``task.commit.skip.commit.*``): its offsets stay uncheckpointed, and the
        next commit covers them. The final commit of a task is never skipped (``tolerate=False``)."""
        failure = self._commit_failure
        if failure is None:
            return
        checkpoint_id, error = failure
        settings = self.commit_settings
        what = f"task '{self.task_name}': commit {checkpoint_id} failed: {type(error).__name__}: {error}"
        if (
            tolerate
            and settings.skip_during_failures
            and self.commit_failures_skipped < settings.max_skipped_exceptions
        ):
            self.commit_failures_skipped += 1
            self._commit_failure = None
            self._snapshotted = {}  # nothing was checkpointed: the next commit must write one, even if idle
            log.warning(
                "%s; skipped (%d of %d failures tolerated)",
                what,
                self.commit_failures_skipped,
                settings.max_skipped_exceptions,
            )
            return
        raise CommitFailedError(what + _limit_reached(settings, "exception", self.commit_failures_skipped)) from error

    def finish_commits(self) -> None:
        """Before the container returns: wait for the commit in flight, and commit what a skipped
        commit left uncommitted. Raises the failure of any of them; a failure of the last commit that the
        policy tolerates (``task.commit.skip.commit.*``) makes another, until one succeeds or the limit is reached."""
        self._wait_for_commit()
        self._raise_commit_failure()
        self.commit()
        self._wait_for_commit()
        while self._commit_failure is not None:
            self._raise_commit_failure()  # raises past the limit (or when nothing is tolerated)
            self.commit()
            self._wait_for_commit()

    @in_task_log_context
    def close(self) -> None:
        if isinstance(self.task, ClosableTask):
            run_hook(self.task.close())

    def _handle_requests(self) -> bool:
        """Serve the task's commit/shutdown request; True when this task must stop processing."""
        coordinator = self.coordinator
        stop = coordinator.shutdown_requested
        if stop:
            self.settle_async()  # the last commit covers what was in flight
        if coordinator.commit_requested or stop:
            self.commit()
        ended, drained = coordinator.ended, coordinator.drained_ssps
        coordinator.clear()
        for ssp in ended:
            self.mark_end_of_stream(ssp)
        for ssp in drained:
            self.mark_drained(ssp)
        if stop:
            self.finished = self.shutdown_requested = True
        return stop or self.finished

    def _skip_before_start(self, ssp: SystemStreamPartition, batch: list[IncomingMessageEnvelope]) -> int:
        """How many leading envelopes precede this task's own start offset (a shared, earlier-registered SSP)."""
        start, compare = self._catch_up[ssp]
        skipped = count_before(batch, start, compare)
        if skipped < len(batch):
            del self._catch_up[ssp]
        return skipped


DEADLINE_SLICE_S = 0.001
"""How long a stride of fast messages may take: what a task runs past its deadline, unless its messages turn slow."""
MAX_STRIDE = 64


def _next_stride(stride: int, elapsed: float) -> int:
    """How many messages to process before the clock is read again, after ``stride`` messages took ``elapsed``.

    A clock reading per message took about 8 % of a pass-through's processing over the embedded log, so
    fast messages are checked in strides that double while the next stride would still end within
    ``DEADLINE_SLICE_S`` (up to ``MAX_STRIDE``). A stride that takes longer brings it back to one: a slow
    task is cut at the first message past its deadline, and one whose messages turn slow within a stride.
    """
    if elapsed * 2 < DEADLINE_SLICE_S:
        return min(stride * 2, MAX_STRIDE)
    return 1


def _limit_reached(settings: CommitSettings, kind: str, tolerated: int) -> str:
    if not settings.skip_during_failures:
        return ""
    return f" (after {tolerated} tolerated: task.commit.skip.commit.{kind}.max.limit)"
