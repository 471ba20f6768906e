"""The collaborators a task instance and the run loop take, as no more than the calls they make on them.

The container hands them its producer pool, checkpoint manager, storage managers and consumers; naming
only the calls keeps those concrete classes out of the runtime's signatures, so a test can drive a task
instance or the run loop with a small fake and a clock it moves by hand.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId
from millstream.model import OutgoingMessageEnvelope, SystemStreamPartition, TaskName


class Clock(Protocol):
    """Where the run loop reads the time its timers (window, commit, stop check) are due against."""

    def monotonic(self) -> float: ...


class SystemClock:
    """The process's monotonic clock: what every container runs on."""

    def monotonic(self) -> float:
        return time.monotonic()


class ConsumerMultiplexer(Protocol):
    """The container's consumers behind one poll (``SystemConsumers``)."""

    def poll(self, active: set[SystemStreamPartition], timeout: float) -> Mapping[SystemStreamPartition, list[Any]]:
        """Envelopes of some of ``active``, waiting at most ``timeout`` seconds for the first."""
        ...


class OutputFlusher(Protocol):
    """The producer pool as a commit sees it: a task's output must be durable before its checkpoint."""

    def flush(self, source: str) -> None: ...


class LingeringOutput(Protocol):
    """The producer pool as the run loop sees it between batches (``ProducerPool.send_lingering``)."""

    def send_lingering(self, drained: bool = False) -> float | None: ...


class MessageSender(Protocol):
    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None: ...


class ProducerLookup(Protocol):
    """The producer pool as the dead-letter path sees it: one producer per system."""

    def producer(self, system: str) -> MessageSender: ...


class CheckpointWriter(Protocol):
    """The checkpoint manager as a commit sees it: the last step that makes a commit durable. The container
    hands its tasks a ``CheckpointGroupCommit``, which writes the checkpoints of tasks committing at the same
    time together; a ``CheckpointManager`` writes them as a batch of their own."""

    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        """Durably record ``checkpoints`` of ``task_name``, in this order; raise why not."""
        ...


class TaskStorage(Protocol):
    """A task's stores as its commits see them (``TaskStorageManager``): snapshot, upload, record, clean up."""

    @property
    def has_backups(self) -> bool:
        """Whether uploads exist that may run on the commit thread."""
        ...

    @property
    def restorable_from_v1(self) -> bool:
        """Whether a V1 checkpoint can restore every backed-up store (false for blob-store backups)."""
        ...

    @property
    def dirty(self) -> bool:
        """Whether a store changed since the last snapshot, so a commit is due even without new offsets."""
        ...

    def write_back(self) -> None:
        """Hand the stores' cached writes to their engines and changelogs (before the producers' flush)."""
        ...

    @property
    def can_hold(self) -> bool:
        """Whether the snapshot may run on the commit thread, the task's writes held meanwhile (``hold``)."""
        ...

    def hold(self) -> None:
        """A commit's cut, on the task's thread: take the cached writes so far, hold later ones until ``release``."""
        ...

    def write_held(self) -> None:
        """On the commit thread: the cut's writes to the engines and changelogs (before the producers' flush)."""
        ...

    def release(self) -> None:
        """The snapshot of the cut is made or failed: the held writes may go to the engines again."""
        ...

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, dict[str, str]]: ...

    def upload(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]
    ) -> dict[str, dict[str, str]]: ...

    def changelog_offsets(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]
    ) -> dict[SystemStreamPartition, str]: ...

    def write_local_checkpoint(self, checkpoint_id: CheckpointId, checkpoints: list[Checkpoint]) -> None: ...

    def cleanup(self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]) -> None: ...

    def seal(self) -> None:
        """At a clean stop, after the task's last commit: the local checkpoints that were not due at it, made for
        it, when the stores hold exactly its state."""
        ...


class PendingStartpoints(Protocol):
    """The startpoints a task started from, removed by the commits that cover them (``AppliedStartpoints``)."""

    @property
    def pending(self) -> Collection[SystemStreamPartition]: ...

    def committed(self, updated: set[SystemStreamPartition]) -> None: ...


class TaskMeter(Protocol):
    """A task's metrics as its hot path sees them (``TaskMeters``); ``None`` instead when metrics are off."""

    def batch(self, ssp: SystemStreamPartition, envelopes: Sequence[Any], seconds: float) -> None: ...

    def committed(self, seconds: float) -> None: ...

    def commit_phase(self, phase: str, seconds: float) -> None:
        """One phase of a commit (flush, snapshot, upload, checkpoint, cleanup) took ``seconds``."""
