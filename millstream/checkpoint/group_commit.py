"""Group commit: the checkpoints of a container's tasks that commit at the same time, written together.

A container's tasks finish their commits on the commit threads (``TaskCommitter``), each with its own
checkpoints to write once its snapshot and upload succeeded. Written one task at a time, a round of 1,000 tasks
costs 1,000 (or, with V1 and V2, 2,000) SQL transactions, Kafka transactions or appends, each a round trip and,
on SQLite, a GIL switch per statement. Here a task hands its checkpoints over and waits: the first task to find
no write under way takes every checkpoint waiting and writes them in one ``CheckpointManager.write_batch`` (one
SQL transaction, one produce batch and flush, one append); the tasks that arrive meanwhile wait for the next
batch, which the first of them writes as soon as this one ended. Nothing waits on a timer: a task alone is
written at once, and a batch holds exactly the tasks that were ready while the previous one was written (the
shape of a database's group commit), so the batches grow with the load and need no clock.

Guarantees kept: a task hands over its checkpoints only after its own snapshot and upload succeeded (the
committer calls this last), and returns only once they are durable; its checkpoints are written in the order
it gave (the version it resumes from first) and in the same batch; a failure is the task's own (a batch that
failed as a whole, such as a fenced writer, fails every task of it), raised to that task's commit, which
applies the commit-failure policy. Fencing is the manager's: the batch is one fenced write.

The queue's rules are sans-IO (``CheckpointBatches``): the threads only wait on a condition around them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from millstream.checkpoint.base import CheckpointManager
from millstream.checkpoint.checkpoint import Checkpoint
from millstream.model import TaskName


@dataclass(eq=False)
class PendingCheckpoints:
    """One task's checkpoints waiting for a batch, and how that batch ended for it."""

    task_name: TaskName
    checkpoints: tuple[Checkpoint, ...]
    done: bool = False
    error: BaseException | None = field(default=None, repr=False)


class CheckpointBatches:
    """Which waiting checkpoints the next write takes: every one waiting, in the order they arrived, and
    none while a batch is being written. Single-threaded (its caller holds a lock); no I/O, no clock."""

    def __init__(self) -> None:
        self._waiting: list[PendingCheckpoints] = []
        self.writing = False
        """A batch was taken and has not been reported ``written`` yet."""
        self.batches = 0
        """Batches taken so far."""

    @property
    def waiting(self) -> int:
        """Tasks waiting for the next batch."""
        return len(self._waiting)

    def add(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> PendingCheckpoints:
        pending = PendingCheckpoints(task_name, tuple(checkpoints))
        self._waiting.append(pending)
        return pending

    def next_batch(self) -> list[PendingCheckpoints] | None:
        """Everything waiting, to write now; None while a batch is being written or nothing waits."""
        if self.writing or not self._waiting:
            return None
        batch, self._waiting = self._waiting, []
        self.writing = True
        self.batches += 1
        return batch

    def written(
        self,
        batch: Sequence[PendingCheckpoints],
        failures: Mapping[TaskName, BaseException],
        error: BaseException | None = None,
    ) -> None:
        """The batch's write ended: ``error`` failed all of it, else ``failures`` failed those tasks only."""
        for pending in batch:
            pending.done = True
            pending.error = error if error is not None else failures.get(pending.task_name)
        self.writing = False


class CheckpointGroupCommit:
    """The checkpoint writer a container hands its tasks' committers: ``write_task_checkpoints`` from any
    thread, batched as the module docstring says. Thread-safe."""

    def __init__(self, manager: CheckpointManager) -> None:
        self.manager = manager
        self._batches = CheckpointBatches()
        self._changed = threading.Condition()

    @property
    def batches(self) -> int:
        """Batches written (or tried) so far."""
        return self._batches.batches

    @property
    def waiting(self) -> int:
        """Tasks waiting for the next batch (for tests and metrics)."""
        with self._changed:
            return self._batches.waiting

    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        """Write ``checkpoints`` of ``task_name`` (in this order) with whatever other tasks are writing now;
        return once they are durable, or raise why this task's write failed."""
        with self._changed:
            pending = self._batches.add(task_name, checkpoints)
            batch = self._batches.next_batch()
            while batch is None and not pending.done:
                self._changed.wait()
                batch = self._batches.next_batch() if not pending.done else None
        if batch is not None:
            self._write(batch)
        if pending.error is not None:
            raise pending.error

    def _write(self, batch: list[PendingCheckpoints]) -> None:
        failures: Mapping[TaskName, BaseException] = {}
        error: BaseException | None = None
        try:
            failures = self.manager.write_batch(
                [(pending.task_name, checkpoint) for pending in batch for checkpoint in pending.checkpoints]
            )
        except BaseException as raised:  # the whole batch failed: each of its tasks raises it
            error = raised
        finally:
            with self._changed:
                self._batches.written(batch, failures, error)
                self._changed.notify_all()
