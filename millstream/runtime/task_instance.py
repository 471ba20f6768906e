"""One task of a container: the user's task object, its partitions, what it processed, windowing and end-of-stream.

A task instance feeds the task its messages, records the offset of the last message processed per partition
(the task's progress), serves what the task asks of its coordinator (commit, shutdown, end-of-stream, drain) and
calls ``window()``, the end-of-stream and drain listeners. Under a run loop, a task that ended leaves its final
commit to the loop, which commits the tasks that ended together as a group (``defer_final_commit``). Committing is
its ``TaskCommitter``'s (``runtime/task_committer.py``): the order of a commit's steps, the asynchronous upload, the
rules for a commit due while the previous one is in flight, exactly-once; the instance calls it, and hands it the
progress it records, which the committer reads only at a commit's cut.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
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
from millstream.checkpoint.offset_manager import count_before
from millstream.checkpoint.purge import CommittedMessagePurger
from millstream.config.settings import Settings
from millstream.contracts.metrics import NOOP_METRICS, MetricsRegistry
from millstream.errors import MillstreamError
from millstream.log_context import in_task_log_context
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.runtime.async_tasks import AsyncProcessor, run_hook
from millstream.runtime.process_errors import ProcessErrorPolicy, TaskCallbackError
from millstream.runtime.seams import CheckpointWriter, OutputFlusher, PendingStartpoints, TaskMeter, TaskStorage
from millstream.runtime.task_committer import CommitSettings, TaskCommitter
from millstream.runtime.transaction import ContainerTransaction
from millstream.startpoint.manager import StartpointManager
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
    config: Settings
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
        """The commit's collaborators (``producers``, ``checkpoint_manager``, ``startpoints``, ``storage``,
        ``commit_settings``, ``commit_executor``, ``purger``, ``transaction``) go to the task's ``TaskCommitter``."""
        self.task_name = task_name
        self.task = task
        self.ssps = ssps
        self.context = context
        self.collector = collector
        self.coordinator = ReadableCoordinator()
        self.last_processed: dict[SystemStreamPartition, str] = {
            ssp: offset for ssp, offset in checkpointed.items() if offset is not None and ssp in ssps
        }
        """The offset of the last message processed per partition: what the next commit checkpoints."""
        self._updated: set[SystemStreamPartition] = set()
        """Partitions that processed a message (or reached end-of-stream) since start."""
        self._catch_up = dict(catch_up_from)
        """SSPs shared with tasks that start earlier (broadcast): skip envelopes before our own start."""
        self.end_of_stream: set[SystemStreamPartition] = set()
        """Partitions no longer read: they reached end-of-stream or drained."""
        self.drained: set[SystemStreamPartition] = set()
        """Partitions drained in this run (``mark_drained``)."""
        self.finished = False
        self._ended: list[TaskInstance] | None = None
        """Where the task goes when it ends, for its run loop to make its final commit (``defer_final_commit``)."""
        self.final_commit_pending = False
        """The task ended (end-of-stream or drain on every partition) and its final commit is still to be made."""
        self.shutdown_requested = False
        """The task called ``coordinator.shutdown()``: the whole container commits and stops."""
        self.processed = 0
        self._windowable = isinstance(task, WindowableTask)
        self._process_batch_call = task.process_batch if isinstance(task, BatchStreamTask) else None
        """A ``BatchStreamTask`` takes each partition's batch whole."""
        self.process_errors = process_errors or ProcessErrorPolicy()
        self._clock = clock
        self.meters = meters
        """The task's runtime metrics; None when metrics are off, so the hot path checks one local."""
        self.committer = TaskCommitter(
            task_name,
            producers,
            checkpoint_manager,
            self.last_processed,
            self._updated,
            listener=task if isinstance(task, CheckpointListener) else None,
            startpoints=startpoints,
            storage=storage,
            settings=commit_settings,
            executor=commit_executor,
            purger=purger,
            clock=clock,
            meters=meters,
            transaction=transaction,
        )
        self.async_processor = self._async_processor()

    def _async_processor(self) -> AsyncProcessor | None:
        """An ``AsyncStreamTask``'s messages in flight (``runtime/async_tasks.py``); None for any other task."""
        task = self.task
        if not isinstance(task, AsyncStreamTask):
            return None
        config = self.context.config.task
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
        self.finished = True
        if self._ended is not None:
            self.final_commit_pending = True  # the run loop commits the tasks that ended about now together
            self._ended.append(self)
        else:
            self.commit()

    def defer_final_commit(self, ended: list[TaskInstance]) -> None:
        """From now on a task that ends appends itself to ``ended`` and leaves its final commit to its run loop
        (``final_commit_pending``), which first lets every task that ends about the same time handle its end, then
        commits them together (``RunLoop._final_commits``). The task is finished at once: it reads nothing more."""
        self._ended = ended

    def flush_output(self) -> None:
        """Make what the task sent so far durable now (its commit would too, later): the final output of a task
        that ended goes out before the final commits of the tasks that ended with it."""
        self.committer.producers.flush(self.task_name)

    @in_task_log_context
    def commit(self) -> None:
        """Commit what the task processed so far (``TaskCommitter.commit``): its output, its stores' state and its
        offsets. An ``AsyncStreamTask``'s messages in flight go on: the offsets (``_released``) and output (held
        until release) cover the completed prefix. A final commit still pending is this one."""
        self.final_commit_pending = False
        self.committer.commit()

    @in_task_log_context
    def commit_final(self) -> None:
        """The final commit of a task that ended, made by its run loop with those of the tasks that ended with it
        (``TaskCommitter.commit(final=True)``: its snapshot may run on the commit thread, the task being idle)."""
        self.final_commit_pending = False
        self.committer.commit(final=True)

    @property
    def commit_owed(self) -> bool:
        """A commit was skipped while one uploaded (``TaskCommitter.commit_owed``); the run loop reads it for every
        task each round."""
        return self.committer.commit_owed

    def commit_if_owed(self) -> None:
        """Make the commit skipped while the last one uploaded, once that upload ended (``TaskCommitter``)."""
        self.committer.commit_if_owed()

    def finish_commits(self) -> None:
        """Before the container returns: the commit in flight and the last one (``TaskCommitter.finish_commits``)."""
        self.committer.finish_commits()

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
