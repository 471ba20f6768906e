"""The contract of a checkpoint manager: the durable record of how far each task has processed."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Self

from millstream.checkpoint.checkpoint import Checkpoint
from millstream.contracts.metadata import FencedError, MetadataStore
from millstream.contracts.systems import SystemProducer
from millstream.errors import ConfigError, MillstreamError
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

    def is_current(self, store: MetadataStore) -> bool:
        """Whether the metadata store still names this generation and this attempt of the container."""
        from millstream.contracts.coordination import writer_expectation

        expected = writer_expectation(self.generation, self.container_id, self.epoch)
        return all(store.get(namespace, key) == value for (namespace, key), value in expected.items())


class ReadOnlyCheckpointManagerError(MillstreamError):
    """A checkpoint manager created without a ``WriterFence`` was asked to write."""


def require_fence(fence: WriterFence | None, action: str) -> WriterFence:
    if fence is None:
        raise ReadOnlyCheckpointManagerError(
            f"cannot {action}: this checkpoint manager was created without a writer fence (read-only)"
        )
    return fence


class CheckpointManager(ABC):
    def __enter__(self) -> Self:
        """Leaving stops the manager; entering does not start it."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:  # noqa: B027 - optional hook
        """Open resources; called once."""

    def register(self, task_name: TaskName) -> None:  # noqa: B027 - optional hook
        """Declare a task whose checkpoints this manager will read or write."""

    @abstractmethod
    def read_last_checkpoint(self, task_name: TaskName) -> Checkpoint | None: ...

    @abstractmethod
    def write_checkpoint(self, task_name: TaskName, checkpoint: Checkpoint) -> None:
        """Durably record ``checkpoint``; raises ``FencedError`` if this writer is fenced off."""

    def write_batch(self, checkpoints: Sequence[tuple[TaskName, Checkpoint]]) -> dict[TaskName, BaseException]:
        """Durably record the checkpoints of several tasks at once (a commit round's group, handed over by
        ``CheckpointGroupCommit``): each task's in the order given. Returns the tasks whose checkpoints failed,
        with why; every other task's are written. Raises ``FencedError`` when this writer is fenced off (every
        task of the batch failed then), and anything it cannot assign to a task for the whole batch.

        A manager that can writes the batch in one round trip (one SQL transaction, one produce batch and
        flush); this default writes one checkpoint at a time and, once a task's write failed, skips that
        task's later ones (the version a task resumes from is first: see ``TaskCommitter``)."""
        failures: dict[TaskName, BaseException] = {}
        for task_name, checkpoint in checkpoints:
            if task_name in failures:
                continue
            try:
                self.write_checkpoint(task_name, checkpoint)
            except FencedError:
                raise
            except Exception as error:  # this task's commit fails; the others' go on
                failures[task_name] = error
        return failures

    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        """One task's checkpoints, in order, as a batch of its own (``TaskCommitter``'s seam; a container hands
        its tasks a ``CheckpointGroupCommit`` instead, which batches tasks committing at the same time)."""
        failures = self.write_batch([(task_name, checkpoint) for checkpoint in checkpoints])
        if task_name in failures:
            raise failures[task_name]

    @abstractmethod
    def read_all(self) -> dict[TaskName, Checkpoint]:
        """Every task's last checkpoint (for tools: ``millstream checkpoint show``)."""

    @abstractmethod
    def clear_checkpoints(self) -> None: ...

    def join_transaction(self, producer: SystemProducer) -> None:
        """Exactly-once: from now on append checkpoints through ``producer``, inside the container's open
        transaction, which the container's commit ends; they become visible with the output and changelog
        writes they cover, or not at all. This default refuses: the manager writes elsewhere."""
        raise ConfigError(
            "task.processing.guarantee=exactly-once: these checkpoints cannot be written in the output's "
            "transaction; set task.checkpoint.factory=kafka (a checkpoint topic on the Kafka system the job writes to)"
        )

    def stop(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""
