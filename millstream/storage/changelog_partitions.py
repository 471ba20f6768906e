"""Which changelog partition each task's stores write to, kept in the metadata store.

Samza keeps this mapping in its coordinator stream so that it never changes while a job evolves: a
task keeps its partition when other tasks come or go (a changelog partition holds that task's state
and nobody else's). The job coordinator assigns partitions to new tasks before containers start:
``Partition N`` gets N when free (the natural choice with the default grouper), any other task the
next free number.
"""

from __future__ import annotations

from collections.abc import Iterable

from millstream.contracts.metadata import MetadataStore
from millstream.model import TaskName
from millstream.storage.errors import StoreError

CHANGELOG_PARTITION_NAMESPACE = "changelog-partition"


def changelog_partitions(store: MetadataStore) -> dict[TaskName, int]:
    return {TaskName(task): int(raw) for task, raw in store.all(CHANGELOG_PARTITION_NAMESPACE).items()}


def assign_changelog_partitions(store: MetadataStore, task_names: Iterable[TaskName]) -> dict[TaskName, int]:
    """Give every task without one a changelog partition; returns the whole mapping."""
    mapping = changelog_partitions(store)
    used = set(mapping.values())
    new = sorted((TaskName(t) for t in task_names if t not in mapping), key=lambda t: TaskName(t).sort_key())
    pending = []
    for task in new:
        prefix, _, number = task.rpartition(" ")
        if prefix == "Partition" and number.isdigit() and int(number) not in used:
            mapping[task] = int(number)
            used.add(int(number))
        else:
            pending.append(task)
    next_free = 0
    for task in pending:
        while next_free in used:
            next_free += 1
        mapping[task] = next_free
        used.add(next_free)
    if new:
        store.put_all(CHANGELOG_PARTITION_NAMESPACE, {task: str(mapping[task]).encode() for task in new})
    return mapping


def changelog_partition(store: MetadataStore, task_name: TaskName) -> int:
    raw = store.get(CHANGELOG_PARTITION_NAMESPACE, task_name)
    if raw is None:
        raise StoreError(
            f"task '{task_name}' has no changelog partition: the job coordinator assigns them when it publishes "
            "the job model (was the job started by an older millstream?)"
        )
    return int(raw)
