"""The low-level API: what a user implements to process messages, as Samza's StreamTask.

A task class is named by ``task.class``; one instance is created per task (per input partition with
the default grouper) in the container that hosts it. Optional capabilities are separate base classes
so a task declares exactly what it does:

    class PageViewCounter(StreamTask, InitableTask, EndOfStreamListenerTask): ...
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from millstream.model import (
    IncomingMessageEnvelope,
    OutgoingMessageEnvelope,
    SystemStream,
    SystemStreamPartition,
    TaskName,
)

if TYPE_CHECKING:
    from millstream.api.remote_table import AsyncTable, RemoteTable
    from millstream.config.settings import Settings
    from millstream.contracts.metrics import MetricsRegistry


class MessageCollector(Protocol):
    """Where a task sends output; buffered, and flushed before every checkpoint."""

    def send(self, envelope: OutgoingMessageEnvelope) -> None: ...

    def send_batch(self, stream: SystemStream, messages: Sequence[Any], keys: Sequence[Any] | None = None) -> None:
        """Send ``messages[i]`` with ``keys[i]`` (no keys: ``None`` each) to ``stream``, in order, as ``send``
        would one by one, but with no envelope per message: a batch of bytes goes to the producer in one
        call. For a task that works on batches (``BatchStreamTask``); partition keys, pinned partitions,
        timestamps and headers take ``send``."""
        ...


class TaskCoordinator(Protocol):
    """Lets a task ask for a commit or a shutdown once the current call returns."""

    def commit(self) -> None: ...

    def shutdown(self) -> None: ...

    def end_of_stream(self, ssp: SystemStreamPartition) -> None:
        """Declare ``ssp`` finished although its system never ends it — an intermediate partition whose
        producers all sent end-of-stream. Once the current call returns it is treated as a partition that
        reached end-of-stream: no longer polled, and the task ends when all its partitions did."""
        ...

    def drained(self, ssp: SystemStreamPartition) -> None:
        """Declare ``ssp`` drained — an intermediate partition whose producers all drained or ended while
        the job drains (``millstream job drain``). Like ``end_of_stream`` for this run only: no longer
        polled, nothing read past the current message, and the task drains once all its partitions ended
        or drained."""
        ...


class TaskContext(Protocol):
    """What a task sees of its runtime at ``init``."""

    @property
    def task_name(self) -> TaskName: ...

    @property
    def config(self) -> Settings: ...

    @property
    def system_stream_partitions(self) -> frozenset[SystemStreamPartition]: ...

    @property
    def container_id(self) -> str: ...

    @property
    def repositioned(self) -> frozenset[SystemStreamPartition]:
        """Partitions starting elsewhere than after their checkpoint (startpoint, ``reset.offset``):
        a task that tracks its own position must not treat what they deliver as a replay."""
        ...

    def get_store(self, name: str) -> Any: ...

    def get_table(self, table: str | RemoteTable) -> AsyncTable:
        """The container's instance of a remote table: by id (defined in ``tables.<id>.definition``) or by
        its ``RemoteTable``. Every task of the container gets the same instance (one rate limiter, cache
        and batcher); its calls are ``await``-ed, from ``process_async`` or an ``async`` hook."""
        ...

    @property
    def metrics(self) -> MetricsRegistry:
        """The task's own counters, gauges and timers (``metrics.counter("enriched").inc()``), exposed as
        ``millstream_user_<name>`` with the task's labels; they do nothing while metrics are off."""
        ...


class StreamTask(ABC):
    @abstractmethod
    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """Handle one message. Raising fails the container; it restarts from the last checkpoint."""


class BatchStreamTask(StreamTask):
    """A task that takes a partition's messages a batch at a time, as Spark users think of data.

    ``process_batch`` gets the messages of one input partition that one poll returned (up to the system's
    batch size, in order), so the framework's per-message work around the task goes, and a task that sends
    with ``collector.send_batch`` builds no envelope per output message either.

    The batch is the unit of processing, and so of failure: when ``process_batch`` raises, the job's
    ``task.process.errors`` policy applies to every message of the batch (``fail`` names its partition and
    offsets; ``skip`` and ``dead-letter`` go past all of them), and output sent before the raise stays sent.
    A commit, shutdown or end-of-stream the task asks for takes effect after the batch, and covers it.
    ``process`` hands one message over as a batch of one, so the task also runs wherever a single message
    is delivered.
    """

    @abstractmethod
    def process_batch(
        self, envelopes: Sequence[IncomingMessageEnvelope], collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """Handle a batch of one partition's messages, in order."""

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        self.process_batch((envelope,), collector, coordinator)


class AsyncStreamTask(StreamTask):
    """A task whose processing is a coroutine (Samza's ``AsyncStreamTask``, in ``async def``): for jobs that
    call other services (REST, databases, feature stores) per message.

    The container runs ``process_async`` on its asyncio event loop, up to ``task.max.concurrency`` messages
    in flight per task. Output sent through ``collector`` is held with its message and sent once the
    message is released: under ``task.async.ordering=partition`` (the default) in offset order per
    partition, under ``key`` as each completes, messages of one key running one after another. A commit
    covers only the completed prefix of each partition, and commit, ``window()``, end-of-stream, drain and
    stop first wait for the messages in flight (``task.callback.timeout.ms`` bounds each), so a crash
    replays every message whose output may be missing: at-least-once (or exactly-once) as for ``process()``.
    A coroutine that raises, or runs past ``task.callback.timeout.ms`` (it is cancelled), fails its message
    under ``task.process.errors``. Requests to ``coordinator`` take effect once the message completed.

    The hooks of the other task interfaces (``init``, ``window``, ``close``, ``on_end_of_stream`` …) may be
    ``async def`` as well: the container awaits them on the same loop, where a client session opened in
    ``init`` belongs.
    """

    @abstractmethod
    async def process_async(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """Handle one message; may await. Raising fails the message under ``task.process.errors``."""

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """Run ``process_async`` for one message to its end on a loop of its own — for calling the task by
        hand (a test); the container never calls it, it runs ``process_async`` concurrently on its loop."""
        asyncio.run(self.process_async(envelope, collector, coordinator))


class InitableTask(ABC):
    @abstractmethod
    def init(self, context: TaskContext) -> None:
        """Called once before the first message."""


class WindowableTask(ABC):
    @abstractmethod
    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called every ``task.window.ms``, between messages."""


class ClosableTask(ABC):
    @abstractmethod
    def close(self) -> None:
        """Called once when the task stops, after its last commit."""


class EndOfStreamListenerTask(ABC):
    @abstractmethod
    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called once when every input partition of this task has reached end-of-stream."""


class PartitionEndOfStreamListenerTask(ABC):
    @abstractmethod
    def on_partition_end_of_stream(
        self, ssp: SystemStreamPartition, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """Called once per input partition as it reaches end-of-stream, before ``on_end_of_stream`` —
        so a task can pass the end of one input on (to an intermediate stream) while others go on."""


class DrainListenerTask(ABC):
    """Samza's ``DrainListenerTask``: told that the job drains (``millstream job drain``).

    Draining stops an unbounded job cleanly: the container stops reading the task's inputs, calls
    ``on_drain`` once every input partition drained (or ended), commits and stops; the job exits 0 with the
    outcome ``drained``. Unlike end-of-stream, nothing is final: the next run resumes after the checkpoint.
    """

    @abstractmethod
    def on_drain(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Called once when every input partition of this task drained or ended, before the final commit:
        the place to emit what the task holds back for later (open aggregates)."""


class PartitionDrainListenerTask(ABC):
    @abstractmethod
    def on_partition_drain(
        self, ssp: SystemStreamPartition, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """Called once per input partition as the runtime stops reading it because the job drains (or the
        task declared it drained), before ``on_drain`` — so a task can pass the drain on downstream."""


class CheckpointListener(ABC):
    @abstractmethod
    def before_checkpoint(self) -> None:
        """Called at every commit after the task's output was flushed and before its checkpoint is written,
        on the task's thread: the place to persist state the checkpoint must not get ahead of. Output sent
        from here is flushed by the next commit; writes to the task's stores are part of this commit's
        checkpoint (their changelog records are flushed before the stores are snapshotted)."""
