"""The contract of a checkpoint manager: the durable record of how far each task has processed."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from millstream.checkpoint.checkpoint import Checkpoint
from millstream.model import TaskName


@dataclass(frozen=True)
class WriterFence:
    """Who is writing: the job model generation and the container attempt (epoch).

    A write is refused with ``FencedError`` when the job has moved to a newer generation or a newer
    attempt of the same container has started: a zombie can never overwrite a newer checkpoint.
    """

    generation: int
    container_id: str
    epoch: int


class CheckpointManager(ABC):
    def start(self) -> None:  # noqa: B027 - optional hook
        """Open resources; called once."""

    def register(self, task_name: TaskName) -> None:  # noqa: B027 - optional hook
        """Declare a task whose checkpoints this manager will read or write."""

    @abstractmethod
    def read_last_checkpoint(self, task_name: TaskName) -> Checkpoint | None: ...

    @abstractmethod
    def write_checkpoint(self, task_name: TaskName, checkpoint: Checkpoint) -> None:
        """Durably record ``checkpoint``; raises ``FencedError`` if this writer is fenced off."""

    @abstractmethod
    def read_all(self) -> dict[TaskName, Checkpoint]:
        """Every task's last checkpoint (for tools: ``millstream checkpoint show``)."""

    @abstractmethod
    def clear_checkpoints(self) -> None: ...

    def stop(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""
