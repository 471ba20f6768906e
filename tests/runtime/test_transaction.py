"""Exactly-once: a commit of any task is one commit of all the container's tasks in one transaction; what may
only follow a durable checkpoint (startpoints removed, snapshots cleaned up) waits for that transaction."""

from __future__ import annotations

import pytest

from millstream.model import TaskName
from millstream.runtime.task_instance import TaskInstance
from millstream.runtime.transaction import ContainerTransaction
from tests.runtime.test_task_commit import (
    SSP,
    Events,
    FakeCheckpoints,
    FakeStartpoints,
    FakeStorage,
    envelope,
    make_task,
)


class FakeTransactionalOutput:
    def __init__(self, events: Events, fail: Exception | None = None) -> None:
        self.events = events
        self.fail = fail

    def commit_transaction(self) -> None:
        if self.fail is not None:
            self.events.append("transaction-failed")
            raise self.fail
        self.events.append("transaction-committed")


def two_tasks(events: Events, output: FakeTransactionalOutput) -> tuple[ContainerTransaction, list[TaskInstance]]:
    transaction = ContainerTransaction(output)
    tasks = []
    for name in ("Partition 0", "Partition 1"):
        checkpoints = FakeCheckpoints(events)
        task, _ = make_task(events, FakeStorage(events), checkpoints=checkpoints, startpoints=FakeStartpoints(events))
        task.task_name = TaskName(name)
        task.committer.transaction = transaction
        tasks.append(task)
    transaction.tasks = tasks
    return transaction, tasks


def test_one_tasks_commit_checkpoints_every_task_then_commits_the_transaction_then_cleans_up() -> None:
    events = Events()
    transaction, tasks = two_tasks(events, FakeTransactionalOutput(events))
    for task in tasks:
        task.process(SSP, [envelope(4)])
    tasks[1].commit()
    checkpoints = [e for e in events if e.startswith("checkpoint")]
    assert checkpoints == ["checkpoint-v1", "checkpoint-v2"] * 2  # both tasks, from one task's commit
    committed = events.index("transaction-committed")
    assert events.count("transaction-committed") == 1
    assert all(events.index(e) < committed for e in ("snapshot", "checkpoint-v2"))
    after = events[committed + 1 :]
    assert after.count("startpoints-removed") == 2 and after.count("cleanup") == 2
    assert "startpoints-removed" not in events[:committed] and "cleanup" not in events[:committed]
    assert transaction.commits == 1


def test_a_transaction_that_fails_to_commit_runs_nothing_that_must_follow_a_durable_checkpoint() -> None:
    events = Events()
    transaction, tasks = two_tasks(events, FakeTransactionalOutput(events, fail=RuntimeError("aborted")))
    for task in tasks:
        task.process(SSP, [envelope(2)])
    with pytest.raises(RuntimeError, match="aborted"):
        tasks[0].commit()
    assert "startpoints-removed" not in events and "cleanup" not in events
    assert transaction.commits == 0 and not transaction.committing  # the failure fails the container


def test_a_task_commit_inside_the_containers_commit_does_its_own_part_only() -> None:
    events = Events()
    transaction, tasks = two_tasks(events, FakeTransactionalOutput(events))
    tasks[0].process(SSP, [envelope(1)])
    transaction.commit()
    transaction.commit()  # nothing new: the tasks skip their checkpoints, the transaction still ends
    assert events.count("checkpoint-v2") == 1
    assert events.count("transaction-committed") == 2
