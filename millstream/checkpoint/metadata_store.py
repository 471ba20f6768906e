"""The default checkpoint manager: each task's checkpoints as records of the metadata store.

Each version has its own namespace (``checkpoint-v1`` holds Samza's V1 JSON under the task name,
``checkpoint-v2`` Samza's V2 JSON), so a job can write both while it migrates and read whichever its
``task.checkpoint.read.versions`` prefers. When a record is written its time goes to
``checkpoint-written-at``, which is what ``task.live.checkpoint.max.age.ms`` compares (the append time
of Samza's checkpoint topic).

Every write is fenced: it is a ``compare_and_put`` that also requires the job to be at the writer's
generation and the writer's container to be at the writer's attempt, so a zombie container (an older
generation, or an earlier attempt of the same container) can never overwrite a newer checkpoint.

A record that cannot be read fails the read (``task.checkpoint.validation.enabled``, the default). With
validation off, each write first keeps the record it replaces (``checkpoint-v<N>-previous``), and an
unreadable record is skipped with a warning in favour of that previous one — the fallback Samza's
checkpoint topic gives by holding older records — or, failing that, of the task's other versions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from millstream.checkpoint.base import CheckpointManager, WriterFence, require_fence
from millstream.checkpoint.checkpoint import (
    Checkpoint,
    CheckpointFormatError,
    CheckpointV2,
    deserialize_checkpoint,
    select_checkpoint,
    serialize_checkpoint,
)
from millstream.checkpoint.factory import CheckpointManagerFactory
from millstream.config.settings import Settings
from millstream.contracts.coordination import writer_expectation
from millstream.contracts.metadata import FencedError, MetadataStore
from millstream.errors import MillstreamError
from millstream.model import TaskName

log = logging.getLogger(__name__)

CHECKPOINT_V1_NAMESPACE = "checkpoint-v1"
CHECKPOINT_V2_NAMESPACE = "checkpoint-v2"
CHECKPOINT_NAMESPACES = {1: CHECKPOINT_V1_NAMESPACE, 2: CHECKPOINT_V2_NAMESPACE}
PREVIOUS_NAMESPACES = {version: f"{namespace}-previous" for version, namespace in CHECKPOINT_NAMESPACES.items()}
"""The record each write replaced, kept only when validation is off (there is then something to fall back to)."""
WRITTEN_AT_NAMESPACE = "checkpoint-written-at"
"""``v<version>:<task>`` → epoch milliseconds of the last write of that record."""


class MetadataStoreCheckpointManager(CheckpointManager):
    """Checkpoints in the job's metadata store; thread- and process-safe as the store is.

    Without a ``fence`` the manager only reads (tools, tests); with one, it writes as that
    container attempt. ``read_versions`` (priority order) and ``max_age_ms`` choose among the
    versions a task has, as :func:`select_checkpoint` describes.
    """

    def __init__(
        self,
        store: MetadataStore,
        fence: WriterFence | None = None,
        *,
        read_versions: Sequence[int] = (1,),
        max_age_ms: int = 600_000,
        validation: bool = True,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        if not read_versions:
            raise ValueError("read_versions must name at least one checkpoint version")
        self.store = store
        self.fence = fence
        self.read_versions = tuple(read_versions)
        self.max_age_ms = max_age_ms
        self.validation = validation
        self.skipped = 0
        """Unreadable records skipped (validation off)."""
        self._clock_ms = clock_ms

    def start(self) -> None:
        self.store.init()

    def read_last_checkpoint(self, task_name: TaskName) -> Checkpoint | None:
        candidates = []
        for version in self.read_versions:
            checkpoint = self._read_version(task_name, version)
            if checkpoint is not None:
                candidates.append((checkpoint, self._written_at(task_name, checkpoint)))
        candidates.sort(key=lambda candidate: candidate[1])
        return select_checkpoint(candidates, self.read_versions, self.max_age_ms)

    def _read_version(self, task_name: TaskName, version: int) -> Checkpoint | None:
        data = self.store.get(CHECKPOINT_NAMESPACES[version], task_name)
        if data is None:
            return None
        try:
            return _decode(task_name, version, data)
        except CheckpointFormatError as error:
            if self.validation:
                raise CheckpointFormatError(
                    f"{error} (set task.checkpoint.validation.enabled=false to fall back to the previous checkpoint)"
                ) from None
            self.skipped += 1
            previous = self.store.get(PREVIOUS_NAMESPACES[version], task_name)
            log.warning(
                "%s: skipped (task.checkpoint.validation.enabled=false)%s",
                error,
                "; reading the previous checkpoint" if previous is not None else "",
            )
            if previous is None:
                return None
            try:
                return _decode(task_name, version, previous)
            except CheckpointFormatError as previous_error:
                log.warning("%s: skipped too", previous_error)
                return None

    def write_checkpoint(self, task_name: TaskName, checkpoint: Checkpoint) -> None:
        failures = self.write_batch([(task_name, checkpoint)])
        if task_name in failures:
            raise failures[task_name]

    def write_batch(self, checkpoints: Sequence[tuple[TaskName, Checkpoint]]) -> dict[TaskName, BaseException]:
        """Every checkpoint of the batch, its write time and (validation off) the record it replaces, in one
        fenced write of the store (``compare_and_put_all``: one SQL transaction on SQLite), so a commit round's
        group costs one transaction, not three per checkpoint. All or none: refused, it raises ``FencedError``
        naming the batch's tasks."""
        if not checkpoints:
            return {}
        tasks = sorted({task_name for task_name, _ in checkpoints})
        fence = require_fence(self.fence, f"write the checkpoints of {_tasks(tasks)}")
        expectation = writer_expectation(fence.generation, fence.container_id, fence.epoch)
        now = str(self._clock_ms()).encode()
        items: list[tuple[str, str, bytes]] = []
        for task_name, checkpoint in checkpoints:
            namespace = CHECKPOINT_NAMESPACES[checkpoint.version]
            if not self.validation:
                replaced = self.store.get(namespace, task_name)
                if replaced is not None:
                    items.append((PREVIOUS_NAMESPACES[checkpoint.version], task_name, replaced))
            items.append((namespace, task_name, serialize_checkpoint(checkpoint)))
            items.append((WRITTEN_AT_NAMESPACE, _written_key(task_name, checkpoint.version), now))
        if not self.store.compare_and_put_all(items, expectation):
            raise FencedError(
                f"checkpoint of {_tasks(tasks)} refused: container '{fence.container_id}' "
                f"(generation {fence.generation}, attempt {fence.epoch}) has been superseded by a newer "
                "generation or a newer attempt of the container"
            )
        return {}

    def read_all(self) -> dict[TaskName, Checkpoint]:
        tasks: set[str] = set()
        for version in self.read_versions:
            tasks.update(self.store.all(CHECKPOINT_NAMESPACES[version]))
        result = {}
        for task in tasks:
            checkpoint = self.read_last_checkpoint(TaskName(task))
            if checkpoint is not None:
                result[TaskName(task)] = checkpoint
        return result

    def clear_checkpoints(self) -> None:
        """Delete every task's checkpoints of every version. An operator's action on a stopped job, so
        it is not fenced (the metadata store has no fenced delete); a fenced manager still refuses it
        once superseded."""
        if self.fence is not None and not self.fence.is_current(self.store):
            raise FencedError(
                f"clearing checkpoints refused: container '{self.fence.container_id}' "
                f"(generation {self.fence.generation}, attempt {self.fence.epoch}) has been superseded"
            )
        for namespace in (*CHECKPOINT_NAMESPACES.values(), *PREVIOUS_NAMESPACES.values(), WRITTEN_AT_NAMESPACE):
            self.store.delete_all(namespace, list(self.store.all(namespace)))

    def _written_at(self, task_name: TaskName, checkpoint: Checkpoint) -> int:
        raw = self.store.get(WRITTEN_AT_NAMESPACE, _written_key(task_name, checkpoint.version))
        if raw is not None and raw.isdigit():
            return int(raw)
        # Written before this record existed (or its write was cut short): a V2 knows its commit time.
        return checkpoint.checkpoint_id.millis if isinstance(checkpoint, CheckpointV2) else 0


def _tasks(tasks: Sequence[str]) -> str:
    """``task 'a'`` or ``tasks 'a', 'b'``, up to ten names and how many more."""
    named = ", ".join(f"'{task}'" for task in tasks[:10])
    more = f" and {len(tasks) - 10} more" if len(tasks) > 10 else ""
    return f"task{'s' if len(tasks) > 1 else ''} {named}{more}"


def _written_key(task_name: str, version: int) -> str:
    return f"v{version}:{task_name}"


def _decode(task_name: TaskName, version: int, data: bytes) -> Checkpoint:
    where = f"checkpoint (version {version}) of task '{task_name}' in the metadata store"
    try:
        return deserialize_checkpoint(version, data, where)
    except CheckpointFormatError:
        raise
    except MillstreamError as error:
        raise CheckpointFormatError(f"{where}: {error}") from None


class MetadataStoreCheckpointManagerFactory(CheckpointManagerFactory):
    """``task.checkpoint.factory=metadata`` (the default)."""

    def get_checkpoint_manager(
        self, config: Settings, store: MetadataStore, fence: WriterFence | None = None
    ) -> CheckpointManager:
        task = config.task
        return MetadataStoreCheckpointManager(
            store,
            fence,
            read_versions=task.checkpoint_read_versions,
            max_age_ms=task.live_checkpoint_max_age_ms,
            validation=task.checkpoint_validation_enabled,
        )
