"""The default checkpoint manager: each task's V1 checkpoint as one record of the metadata store.

Records live in namespace ``checkpoint-v1`` under the task name, in Samza's V1 JSON. Every write is
fenced: it is a ``compare_and_put`` that also requires the job to be at the writer's generation and
the writer's container to be at the writer's attempt, so a zombie container (an older generation,
or an earlier attempt of the same container) can never overwrite a newer checkpoint.
"""

from __future__ import annotations

from millstream.checkpoint.base import CheckpointManager, WriterFence
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointV1
from millstream.checkpoint.factory import CheckpointManagerFactory
from millstream.config.core import Config
from millstream.errors import MillstreamError
from millstream.metadata.base import FencedError, MetadataStore
from millstream.metadata.coordination import writer_expectation
from millstream.model import TaskName

CHECKPOINT_V1_NAMESPACE = "checkpoint-v1"


class ReadOnlyCheckpointManagerError(MillstreamError):
    """A checkpoint manager created without a ``WriterFence`` was asked to write."""


class MetadataStoreCheckpointManager(CheckpointManager):
    """Checkpoints in the job's metadata store; thread- and process-safe as the store is.

    Without a ``fence`` the manager only reads (tools, tests); with one, it writes as that
    container attempt.
    """

    def __init__(self, store: MetadataStore, fence: WriterFence | None = None) -> None:
        self.store = store
        self.fence = fence

    def start(self) -> None:
        self.store.init()

    def read_last_checkpoint(self, task_name: TaskName) -> Checkpoint | None:
        data = self.store.get(CHECKPOINT_V1_NAMESPACE, task_name)
        return None if data is None else _decode(task_name, data)

    def write_checkpoint(self, task_name: TaskName, checkpoint: Checkpoint) -> None:
        fence = self._require_fence(f"write the checkpoint of task '{task_name}'")
        accepted = self.store.compare_and_put(
            CHECKPOINT_V1_NAMESPACE,
            task_name,
            checkpoint.to_bytes(),
            writer_expectation(fence.generation, fence.container_id, fence.epoch),
        )
        if not accepted:
            raise FencedError(
                f"checkpoint of task '{task_name}' refused: container '{fence.container_id}' "
                f"(generation {fence.generation}, attempt {fence.epoch}) has been superseded by a newer "
                "generation or a newer attempt of the container"
            )

    def read_all(self) -> dict[TaskName, Checkpoint]:
        return {
            TaskName(task): _decode(TaskName(task), data)
            for task, data in self.store.all(CHECKPOINT_V1_NAMESPACE).items()
        }

    def clear_checkpoints(self) -> None:
        """Delete every task's checkpoint. An operator's action on a stopped job, so it is not fenced
        (the metadata store has no fenced delete); a fenced manager still refuses it once superseded."""
        if self.fence is not None and not self._fence_current(self.fence):
            raise FencedError(
                f"clearing checkpoints refused: container '{self.fence.container_id}' "
                f"(generation {self.fence.generation}, attempt {self.fence.epoch}) has been superseded"
            )
        self.store.delete_all(CHECKPOINT_V1_NAMESPACE, list(self.store.all(CHECKPOINT_V1_NAMESPACE)))

    def _require_fence(self, action: str) -> WriterFence:
        if self.fence is None:
            raise ReadOnlyCheckpointManagerError(
                f"cannot {action}: this checkpoint manager was created without a writer fence (read-only)"
            )
        return self.fence

    def _fence_current(self, fence: WriterFence) -> bool:
        expected = writer_expectation(fence.generation, fence.container_id, fence.epoch)
        return all(self.store.get(namespace, key) == value for (namespace, key), value in expected.items())


def _decode(task_name: TaskName, data: bytes) -> Checkpoint:
    return CheckpointV1.from_bytes(data, where=f"checkpoint of task '{task_name}' in the metadata store")


class MetadataStoreCheckpointManagerFactory(CheckpointManagerFactory):
    """``task.checkpoint.factory=metadata`` (the default)."""

    def get_checkpoint_manager(
        self, config: Config, store: MetadataStore, fence: WriterFence | None = None
    ) -> CheckpointManager:
        return MetadataStoreCheckpointManager(store, fence)
