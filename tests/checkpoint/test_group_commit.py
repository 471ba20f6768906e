"""The group commit: the checkpoints of tasks committing at the same time are written together, each task's in
its own order, a failure reaching only the tasks it belongs to, and a fenced writer refused for the whole batch."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from millstream.checkpoint.base import CheckpointManager, WriterFence
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.checkpoint.group_commit import CheckpointGroupCommit
from millstream.checkpoint.metadata_store import MetadataStoreCheckpointManager
from millstream.contracts import coordination
from millstream.contracts.metadata import FencedError
from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.model import SystemStreamPartition, TaskName
from tests.helpers import wait_until

SSP = SystemStreamPartition("log", "in", 0)


def v1(offset: int) -> CheckpointV1:
    return CheckpointV1({SSP: str(offset)})


def v2(offset: int) -> CheckpointV2:
    return CheckpointV2(CheckpointId.create(), {SSP: str(offset)}, {})


class GatedManager(CheckpointManager):
    """Records each batch it is asked to write; the first waits for ``release`` so that others queue behind it."""

    def __init__(self, fail: dict[TaskName, BaseException] | None = None, raises: BaseException | None = None):
        self.batches: list[list[tuple[TaskName, Checkpoint]]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail or {}
        self.raises = raises

    def write_batch(self, checkpoints: Sequence[tuple[TaskName, Checkpoint]]) -> dict[TaskName, BaseException]:
        self.batches.append(list(checkpoints))
        self.entered.set()
        assert self.release.wait(30), "the test never released the first batch"
        if self.raises is not None:
            raise self.raises
        return {task: error for task, error in self.fail.items() if any(task == t for t, _ in checkpoints)}

    def write_checkpoint(self, task_name: TaskName, checkpoint: Checkpoint) -> None:
        raise AssertionError("the group commit writes batches only")

    def read_last_checkpoint(self, task_name: TaskName) -> Checkpoint | None:
        return None

    def read_all(self) -> dict[TaskName, Checkpoint]:
        return {}

    def clear_checkpoints(self) -> None:
        pass


def commit_concurrently(
    writer: CheckpointGroupCommit, manager: GatedManager, tasks: list[TaskName]
) -> dict[TaskName, BaseException | None]:
    """The first task writes alone and is held there; the others queue meanwhile, then all are released."""
    outcome: dict[TaskName, BaseException | None] = {}

    def commit(task: TaskName) -> None:
        try:
            writer.write_task_checkpoints(task, [v2(int(task[1:])), v1(int(task[1:]))])
            outcome[task] = None
        except BaseException as error:
            outcome[task] = error

    first = threading.Thread(target=commit, args=(tasks[0],))
    first.start()
    assert manager.entered.wait(30)
    others = [threading.Thread(target=commit, args=(task,)) for task in tasks[1:]]
    for thread in others:
        thread.start()
    wait_until(lambda: writer.waiting == len(tasks) - 1, 30, "every other task queued behind the first batch")
    manager.release.set()
    for thread in [first, *others]:
        thread.join(30)
    return outcome


def test_tasks_committing_together_are_written_in_one_batch_each_with_its_checkpoints_in_order() -> None:
    manager = GatedManager()
    writer = CheckpointGroupCommit(manager)
    tasks = [TaskName(f"t{i}") for i in range(20)]
    outcome = commit_concurrently(writer, manager, tasks)
    assert outcome == dict.fromkeys(tasks)
    assert len(manager.batches) == 2 and writer.batches == 2, "the first task alone, then all the others at once"
    assert [task for task, _ in manager.batches[0]] == [tasks[0], tasks[0]]
    second = manager.batches[1]
    assert sorted({task for task, _ in second}) == sorted(tasks[1:])
    for task in tasks[1:]:
        versions = [checkpoint.version for t, checkpoint in second if t == task]
        assert versions == [2, 1], f"{task}: its checkpoints out of order or apart"
        at = [index for index, (t, _) in enumerate(second) if t == task]
        assert at[1] == at[0] + 1, f"{task}: its checkpoints apart in the batch"


def test_a_task_whose_checkpoint_failed_raises_and_the_others_of_its_batch_return() -> None:
    manager = GatedManager(fail={TaskName("t3"): OSError("no space left for task t3")})
    writer = CheckpointGroupCommit(manager)
    outcome = commit_concurrently(writer, manager, [TaskName(f"t{i}") for i in range(6)])
    assert isinstance(outcome.pop(TaskName("t3")), OSError)
    assert set(outcome.values()) == {None}


def test_a_fenced_batch_fails_every_task_in_it() -> None:
    manager = GatedManager(raises=FencedError("checkpoint of tasks refused: superseded"))
    writer = CheckpointGroupCommit(manager)
    outcome = commit_concurrently(writer, manager, [TaskName(f"t{i}") for i in range(5)])
    assert all(isinstance(error, FencedError) for error in outcome.values()), outcome


def test_a_task_alone_is_written_at_once() -> None:
    manager = GatedManager()
    manager.release.set()
    writer = CheckpointGroupCommit(manager)
    writer.write_task_checkpoints(TaskName("t1"), [v1(5)])
    assert manager.batches == [[(TaskName("t1"), v1(5))]]


class CountingStore(SqliteMetadataStore):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.batched_writes = 0

    def compare_and_put_all(
        self, items: Sequence[tuple[str, str, bytes]], expected: Mapping[tuple[str, str], bytes | None]
    ) -> bool:
        self.batched_writes += 1
        return super().compare_and_put_all(items, expected)


def fenced_store(tmp_path: Path) -> tuple[CountingStore, WriterFence]:
    store = CountingStore(tmp_path / "metadata.db")
    store.init()
    coordination.publish_generation(store, 1)
    fence = WriterFence(1, "0", coordination.start_container_attempt(store, "0"))
    store.batched_writes = 0
    return store, fence


def test_the_metadata_store_writes_a_batch_of_tasks_in_one_transaction_and_reads_each_back(tmp_path: Path) -> None:
    store, fence = fenced_store(tmp_path)
    manager = MetadataStoreCheckpointManager(store, fence, read_versions=(2, 1))
    batch: list[tuple[TaskName, Checkpoint]] = []
    for i in range(50):
        batch += [(TaskName(f"Partition {i}"), v2(i)), (TaskName(f"Partition {i}"), v1(i))]
    assert manager.write_batch(batch) == {}
    assert store.batched_writes == 1
    read = manager.read_all()
    assert {task: checkpoint.offsets[SSP] for task, checkpoint in read.items()} == {
        TaskName(f"Partition {i}"): str(i) for i in range(50)
    }
    assert all(isinstance(checkpoint, CheckpointV2) for checkpoint in read.values())


def test_the_metadata_store_refuses_a_superseded_writers_batch_whole_naming_its_tasks(tmp_path: Path) -> None:
    store, fence = fenced_store(tmp_path)
    manager = MetadataStoreCheckpointManager(store, fence)
    manager.write_batch([(TaskName("Partition 0"), v1(1))])
    coordination.start_container_attempt(store, "0")  # a newer attempt of container 0
    with pytest.raises(FencedError, match="tasks 'Partition 0', 'Partition 1'"):
        manager.write_batch([(TaskName("Partition 0"), v1(9)), (TaskName("Partition 1"), v1(9))])
    reader = MetadataStoreCheckpointManager(store)
    assert {task: c.offsets[SSP] for task, c in reader.read_all().items()} == {TaskName("Partition 0"): "1"}


def test_without_validation_a_batch_keeps_each_replaced_record(tmp_path: Path) -> None:
    store, fence = fenced_store(tmp_path)
    manager = MetadataStoreCheckpointManager(store, fence, validation=False)
    manager.write_batch([(TaskName("a"), v1(1)), (TaskName("b"), v1(2))])
    manager.write_batch([(TaskName("a"), v1(3)), (TaskName("b"), v1(4))])
    assert store.get("checkpoint-v1-previous", "a") is not None and store.get("checkpoint-v1-previous", "b")
    store.put("checkpoint-v1", "a", b"{not json")
    assert manager.read_last_checkpoint(TaskName("a")) == v1(1)
