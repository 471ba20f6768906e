"""Changelog partitions are assigned once per task and kept while the job's tasks change."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.embedded.sqlite import SqliteMetadataStore
from millstream.model import TaskName
from millstream.storage.changelog_partitions import assign_changelog_partitions, changelog_partition
from millstream.storage.errors import StoreError


@pytest.fixture
def store(tmp_path: Path) -> SqliteMetadataStore:
    store = SqliteMetadataStore(tmp_path / "m.db")
    store.init()
    return store


def test_partition_tasks_get_their_own_number(store: SqliteMetadataStore) -> None:
    mapping = assign_changelog_partitions(store, [TaskName(f"Partition {p}") for p in (2, 0, 1)])
    assert mapping == {"Partition 0": 0, "Partition 1": 1, "Partition 2": 2}


def test_other_tasks_get_the_next_free_numbers_and_nobody_moves(store: SqliteMetadataStore) -> None:
    assign_changelog_partitions(store, [TaskName("Partition 1")])
    mapping = assign_changelog_partitions(
        store, [TaskName("Partition 1"), TaskName("SystemStreamPartition [log, a, 0]"), TaskName("Partition 0")]
    )
    assert mapping[TaskName("Partition 1")] == 1 and mapping[TaskName("Partition 0")] == 0
    assert mapping[TaskName("SystemStreamPartition [log, a, 0]")] == 2
    assert changelog_partition(store, TaskName("SystemStreamPartition [log, a, 0]")) == 2


def test_a_task_without_a_partition_is_an_error_naming_it(store: SqliteMetadataStore) -> None:
    with pytest.raises(StoreError, match="task 'Partition 9'"):
        changelog_partition(store, TaskName("Partition 9"))
