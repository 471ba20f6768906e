"""The low-level API: what a user implements to process messages, as Samza's StreamTask.

A task class is named by ``task.class``; one instance is created per task (per input partition with
the default grouper) in the container that hosts it. Optional capabilities are separate base classes
so a task declares exactly what it does:

    class PageViewCounter(StreamTask, InitableTask, EndOfStreamListenerTask): ...
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Protocol

from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStreamPartition, TaskName

if TYPE_CHECKING:
    from millstream.config import Config


class MessageCollector(Protocol):
    """Where a task sends output; buffered, and flushed before every checkpoint."""

    def send(self, envelope: OutgoingMessageEnvelope) -> None: ...


class TaskCoordinator(Protocol):
    """Lets a task ask for a commit or a shutdown once the current call returns."""

    def commit(self) -> None: ...

    def shutdown(self) -> None: ...


class TaskContext(Protocol):
    """What a task sees of its runtime at ``init``."""

    @property
    def task_name(self) -> TaskName: ...

    @property
    def config(self) -> Config: ...

    @property
    def system_stream_partitions(self) -> frozenset[SystemStreamPartition]: ...

    @property
    def container_id(self) -> str: ...

    def get_store(self, name: str) -> Any: ...


class StreamTask(ABC):
    @abstractmethod
    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """Handle one message. Raising fails the container; it restarts from the last checkpoint."""


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
