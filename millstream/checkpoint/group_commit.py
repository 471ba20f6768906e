"""Group commit: the checkpoints of a container's tasks that commit at the same time, written together.

A container's tasks finish their commits on the commit threads (``TaskCommitter``), each with its own
checkpoints to write once its snapshot and upload succeeded. Written one task at a time, a round of 1,000 tasks
costs 1,000 (or, with V1 and V2, 2,000) SQL transactions, Kafka transactions or appends, each a round trip and,
on SQLite, a GIL switch per statement. Here a task hands its checkpoints over and waits: the first task to find
no write under way takes every checkpoint waiting and writes them in one ``CheckpointManager.write_batch`` (one
SQL transaction, one produce batch and flush, one append); the tasks that arrive meanwhile wait for the next
batch, which the first of them writes as soon as this one ended (``millstream/grouped_calls.py``: no timer, a
task alone is written at once, the batches grow with the load).

Guarantees kept: a task hands over its checkpoints only after its own snapshot and upload succeeded (the
committer calls this last), and returns only once they are durable; its checkpoints are written in the order
it gave (the version it resumes from first) and in the same batch; a failure is the task's own (a batch that
failed as a whole, such as a fenced writer, fails every task of it), raised to that task's commit, which
applies the commit-failure policy. Fencing is the manager's: the batch is one fenced write.
"""

from __future__ import annotations

from collections.abc import Sequence

from millstream.checkpoint.base import CheckpointManager
from millstream.checkpoint.checkpoint import Checkpoint
from millstream.grouped_calls import GroupedCalls
from millstream.model import TaskName

TaskCheckpoints = tuple[TaskName, tuple[Checkpoint, ...]]


class CheckpointGroupCommit:
    """The checkpoint writer a container hands its tasks' committers: ``write_task_checkpoints`` from any
    thread, batched as the module docstring says. Thread-safe."""

    def __init__(self, manager: CheckpointManager) -> None:
        self.manager = manager
        self._calls: GroupedCalls[TaskCheckpoints, None] = GroupedCalls(self._write)

    @property
    def batches(self) -> int:
        """Batches written (or tried) so far."""
        return self._calls.batches

    @property
    def waiting(self) -> int:
        """Tasks waiting for the next batch (for tests and metrics)."""
        return self._calls.waiting

    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        """Write ``checkpoints`` of ``task_name`` (in this order) with whatever other tasks are writing now;
        return once they are durable, or raise why this task's write failed."""
        self._calls.call((task_name, tuple(checkpoints)))

    def _write(self, batch: list[TaskCheckpoints]) -> list[BaseException | None]:
        """One ``write_batch`` of every task's checkpoints; each task's answer is its failure, if any."""
        failures = self.manager.write_batch(
            [(task_name, checkpoint) for task_name, checkpoints in batch for checkpoint in checkpoints]
        )
        return [failures.get(task_name) for task_name, _ in batch]
