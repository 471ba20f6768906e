"""Running an ``AsyncStreamTask``: its messages in flight on the container's event loop, released in order.

**Where the loop runs.** One asyncio event loop per container, on the container's own run-loop thread
(``ContainerLoop.current()``): the loop runs while the run loop would otherwise wait (a poll finding
nothing, a task whose window of messages in flight is full) and for an instant after each batch is
started, so the coroutines send their requests at once. Nothing crosses a thread: starting a message is a
``create_task``, a completion is a callback on the same thread, and what a coroutine touches (the
collector, the task's stores) is never touched by two threads — no locks, and the cost per message stays
that of the coroutine itself. A container that runs no asynchronous task never creates a loop.

**Per task** (``AsyncProcessor``): up to ``task.max.concurrency`` messages in flight. Each message's
output is held (``HeldOutput``) and sent when the message is *released*: in offset order per partition
(``task.async.ordering=partition``) or as it completes (``key``, where messages of one key run one after
another). The checkpoint offset of a partition moves only over the completed prefix
(``runtime/async_window.py``), whatever the ordering. A coroutine that raised or outlived
``task.callback.timeout.ms`` fails its message under ``task.process.errors`` when it is released.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from millstream.api.task import AsyncStreamTask, MessageCollector, TaskCoordinator
from millstream.config.views import TaskConfig
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.runtime.async_window import InFlightWindow
from millstream.runtime.process_errors import ProcessErrorPolicy

_local = threading.local()
log = logging.getLogger(__name__)


class CallbackTimeoutError(TimeoutError):
    """``process_async`` did not complete within ``task.callback.timeout.ms``; the message fails under
    ``task.process.errors`` (a ``TaskProcessError`` then names the task, stream, partition and offset)."""


class ContainerLoop:
    """The container's event loop: one per run-loop thread, made at first use."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.progressed = False
        """A message completed since the last ``drive``."""
        self._waiting = False
        self.processors: list[AsyncProcessor] = []
        """The async tasks of the container running now (set by its run loop): a task waiting for room
        releases the others' completions too."""

    def harvest_others(self, waiting: AsyncProcessor) -> None:
        """While ``waiting`` waits for room, the container's other tasks release what completed."""
        for processor in self.processors:
            if processor is not waiting:
                processor.harvest()

    @classmethod
    def current(cls) -> ContainerLoop:
        loop: ContainerLoop | None = getattr(_local, "loop", None)
        if loop is None or loop.loop.is_closed():
            loop = _local.loop = cls()
        return loop

    def completed(self) -> None:
        """A message completed (called on the loop): a ``drive`` waiting for one returns."""
        self.progressed = True
        if self._waiting:
            self._waiting = False
            self.loop.stop()

    def drive(self, timeout: float) -> None:
        """Run the loop until a message completes or ``timeout`` seconds passed (0, or a completion not
        yet seen: one pass, to start what was scheduled and take what the network delivered).

        The loop runs with ``run_forever`` and is stopped by the completion itself (or a timer): no task,
        event or timeout object is made per call, as ``run_until_complete`` would."""
        loop = self.loop
        if timeout <= 0 or self.progressed:
            self.progressed = False
            loop.call_soon(loop.stop)
            loop.run_forever()
            return
        self._waiting = True
        timer = loop.call_later(timeout, self._timed_out)
        try:
            loop.run_forever()
        finally:
            self._waiting = False
            self.progressed = False
            timer.cancel()

    def _timed_out(self) -> None:
        if self._waiting:
            self._waiting = False
            self.loop.stop()

    def run(self, awaitable: Awaitable[Any]) -> Any:
        """Await a hook (``async def init`` …) to its end on this loop."""
        return self.loop.run_until_complete(_awaited(awaitable))

    def close(self) -> None:
        """Cancel what is still running on the loop, give it ``CANCEL_GRACE_S`` to end, and close the loop.

        A container that stops normally has nothing in flight here (its tasks settled); one that failed or was
        superseded may have hundreds of messages in flight. Cancelled, their coroutines leave through their
        ``except``/``finally`` (an aiohttp request closes its connection) while the loop still runs, instead of
        being destroyed with it, or running on in the next container this thread runs."""
        loop = self.loop
        if loop.is_closed():
            return
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                _, stuck = loop.run_until_complete(asyncio.wait(pending, timeout=CANCEL_GRACE_S))
                if stuck:
                    log.warning(
                        "%d coroutine(s) still running %.0f s after their container cancelled them; their loop closes"
                        " with them", len(stuck), CANCEL_GRACE_S,
                    )  # fmt: skip
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


CANCEL_GRACE_S = 5.0
"""How long a container's ending waits for its cancelled coroutines to end (``ContainerLoop.close``)."""


def close_container_loop() -> None:
    """Close this thread's container loop, if it made one (``ContainerLoop.close``); the next use makes a new one."""
    loop: ContainerLoop | None = getattr(_local, "loop", None)
    if loop is not None:
        _local.loop = None
        loop.close()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def run_hook(result: Any) -> None:
    """What a task's hook returned: a coroutine (an ``async def`` hook) is awaited on the container's loop."""
    if result is not None and inspect.isawaitable(result):
        ContainerLoop.current().run(result)


class HeldOutput:
    """The collector a message in flight sends through: its output waits here until the message is released."""

    __slots__ = ("calls",)

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        self.calls.append((envelope,))

    def send_batch(self, stream: SystemStream, messages: Sequence[Any], keys: Sequence[Any] | None = None) -> None:
        self.calls.append((stream, list(messages), None if keys is None else list(keys)))

    def defer(self, work: Callable[[MessageCollector], None]) -> None:
        """Run ``work(collector)`` when the message is released, in its turn (how the high-level API's
        ``map_async`` hands its message to the operators downstream in offset order)."""
        self.calls.append((work, None))

    def replay(self, collector: MessageCollector) -> None:
        for call in self.calls:
            if len(call) == 1:
                collector.send(call[0])
            elif len(call) == 2:
                call[0](collector)
            else:
                collector.send_batch(*call)


class _Message:
    __slots__ = ("envelope", "error", "finished", "output")

    def __init__(self, envelope: IncomingMessageEnvelope, finished: asyncio.Future[None] | None) -> None:
        self.envelope = envelope
        self.output = HeldOutput()
        self.error: BaseException | None = None
        self.finished = finished
        """Key ordering: done when the message completed, so the next one of its key may start."""


class AsyncProcessor:
    """One ``AsyncStreamTask``'s messages in flight; ``released(ssp, offset)`` hears the checkpointable offset."""

    def __init__(
        self,
        task_name: Any,
        task: AsyncStreamTask,
        collector: MessageCollector,
        coordinator: TaskCoordinator,
        errors: ProcessErrorPolicy,
        config: TaskConfig,
        released: Callable[[SystemStreamPartition, str], None],
    ) -> None:
        self.task_name = task_name
        self.process_async = task.process_async
        self.collector = collector
        self.coordinator = coordinator
        self.errors = errors
        self.max_concurrency = config.max_concurrency
        self.timeout_s = config.callback_timeout_ms / 1000
        self.timeout_ms = config.callback_timeout_ms
        self.by_key = config.async_ordering == "key"
        self.in_order = config.async_ordering == "partition"
        self.released = released
        self.window: InFlightWindow[SystemStreamPartition, _Message] = InFlightWindow()
        self.done: list[_Message] = []
        """Completed since the last ``harvest``, in completion order."""
        self._tails: dict[Any, asyncio.Future[None]] = {}
        """Key ordering: the last message started per key."""
        self._loop: ContainerLoop | None = None

    @property
    def in_flight(self) -> int:
        return self.window.in_flight

    @property
    def container_loop(self) -> ContainerLoop:
        if self._loop is None:
            self._loop = ContainerLoop.current()
        return self._loop

    def submit(self, messages: Sequence[IncomingMessageEnvelope], deadline: float, clock: Callable[[], float]) -> int:
        """Start ``messages`` in order, waiting for room while the window is full; returns how many started
        (fewer at ``deadline``, or when a completed message asked the coordinator for something)."""
        container = self.container_loop
        limit = self.max_concurrency
        started = 0
        for envelope in messages:
            while self.window.in_flight >= limit:
                remaining = deadline - clock()
                if remaining <= 0:
                    break
                if not self.done:  # completions another task's wait took are harvested, not waited for
                    container.drive(min(remaining, self.timeout_s))
                self.harvest()
                container.harvest_others(self)
            if self.window.in_flight >= limit or self.coordinator_requested():
                break  # the deadline passed with no room, or a completed message asked for something
            self._start(container.loop, envelope)
            started += 1
        container.drive(0)  # the new coroutines run to their first await: their requests go out now
        self.harvest()
        return started

    def coordinator_requested(self) -> bool:
        return bool(getattr(self.coordinator, "requested", False))

    def _start(self, loop: asyncio.AbstractEventLoop, envelope: IncomingMessageEnvelope) -> None:
        after: asyncio.Future[None] | None = None
        finished: asyncio.Future[None] | None = None
        if self.by_key:
            key = _hashable(envelope.key)
            after = self._tails.get(key)
            finished = self._tails[key] = loop.create_future()
        message = _Message(envelope, finished)
        self.window.started(envelope.ssp, envelope.offset, message)
        loop.create_task(self._run(message, after))

    async def _run(self, message: _Message, after: asyncio.Future[None] | None) -> None:
        try:
            if after is not None:
                await asyncio.shield(after)  # the message before it of the same key completed
            await self._call(message)
        except Exception as error:
            message.error = error
        finally:
            if message.finished is not None:
                message.finished.set_result(None)
                key = _hashable(message.envelope.key)
                if self._tails.get(key) is message.finished:
                    del self._tails[key]
            self.done.append(message)
            self.container_loop.completed()

    async def _call(self, message: _Message) -> None:
        timeout = asyncio.timeout(self.timeout_s)
        try:
            async with timeout:
                await self.process_async(message.envelope, message.output, self.coordinator)
        except TimeoutError:
            if not timeout.expired():
                raise  # the task's own timeout, not ours
            raise CallbackTimeoutError(
                f"process_async did not complete within task.callback.timeout.ms={self.timeout_ms}"
            ) from None

    def harvest(self) -> None:
        """Release what completed: send its output, apply the error policy, move the checkpoint offsets."""
        if not self.done:
            return
        done, self.done = self.done, []
        window = self.window
        for message in done:
            envelope = message.envelope
            ssp = envelope.ssp
            if not self.in_order:  # output as each completes; the checkpoint still waits for the prefix
                self._release(message)
                window.completed(ssp, envelope.offset)
            else:
                for released in window.completed(ssp, envelope.offset):
                    self._release(released)
            committable = window.committable(ssp)
            if committable is not None:
                self.released(ssp, committable)

    def _release(self, message: _Message) -> None:
        error = message.error
        try:
            message.output.replay(self.collector)
        except Exception as send_error:  # output that cannot be serialized is the message's failure
            error = error or send_error
        if error is not None and isinstance(error, Exception):
            self.errors.on_process_error(self.task_name, message.envelope, error)

    def settle(self) -> None:
        """Wait until no message is in flight, releasing each (``task.callback.timeout.ms`` bounds each)."""
        container = self.container_loop
        while self.window.in_flight:
            if not self.done:  # the loop is shared: another task's wait may have taken our completions
                container.drive(self.timeout_s)
            self.harvest()
        self.harvest()


def _hashable(key: Any) -> Any:
    try:
        hash(key)
    except TypeError:
        return repr(key)
    return key
