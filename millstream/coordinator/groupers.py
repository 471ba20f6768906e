"""How input partitions become tasks, and tasks become containers — Samza's groupers.

``GroupByPartition`` (default): one task per partition number, holding that partition of every input
stream, so a join of two co-partitioned streams sees both sides in one task.
``GroupBySystemStreamPartition``: one task per input partition.
Broadcast partitions (``task.broadcast.inputs``) go to every task instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Set
from typing import Protocol

from millstream.errors import ConfigError
from millstream.job_model import ContainerModel, TaskModel
from millstream.model import SystemStreamPartition, TaskName


class SystemStreamPartitionGrouper(Protocol):
    def group(self, ssps: Set[SystemStreamPartition]) -> dict[TaskName, set[SystemStreamPartition]]: ...


class GroupByPartition:
    def group(self, ssps: Set[SystemStreamPartition]) -> dict[TaskName, set[SystemStreamPartition]]:
        groups: dict[TaskName, set[SystemStreamPartition]] = defaultdict(set)
        for ssp in ssps:
            groups[TaskName(f"Partition {ssp.partition}")].add(ssp)
        return dict(groups)


class GroupBySystemStreamPartition:
    def group(self, ssps: Set[SystemStreamPartition]) -> dict[TaskName, set[SystemStreamPartition]]:
        return {TaskName(str(ssp)): {ssp} for ssp in ssps}


GROUPERS: dict[str, type[SystemStreamPartitionGrouper]] = {
    "GroupByPartition": GroupByPartition,
    "GroupBySystemStreamPartition": GroupBySystemStreamPartition,
    "org.apache.samza.container.grouper.stream.GroupByPartitionFactory": GroupByPartition,
    "org.apache.samza.container.grouper.stream.GroupBySystemStreamPartitionFactory": GroupBySystemStreamPartition,
}


def grouper_for(name: str) -> SystemStreamPartitionGrouper:
    try:
        return GROUPERS[name]()
    except KeyError:
        raise ConfigError(
            f"config key 'job.systemstreampartition.grouper.factory': unknown grouper '{name}' "
            f"(accepted: GroupByPartition, GroupBySystemStreamPartition)"
        ) from None


def group_tasks(
    grouper: SystemStreamPartitionGrouper,
    ssps: Iterable[SystemStreamPartition],
    broadcast: Set[SystemStreamPartition],
) -> dict[TaskName, frozenset[SystemStreamPartition]]:
    """Group the non-broadcast partitions, then add every broadcast partition to every task."""
    regular = {ssp for ssp in ssps if ssp not in broadcast}
    groups = grouper.group(regular)
    if not groups and broadcast:
        groups = {TaskName("Partition 0"): set()}
    return {name: frozenset(members | broadcast) for name, members in groups.items()}


def group_containers(
    tasks: dict[TaskName, frozenset[SystemStreamPartition]], container_count: int
) -> dict[str, ContainerModel]:
    """Spread tasks over containers round-robin in task order (Samza's GroupByContainerCount)."""
    if container_count > len(tasks):
        raise ConfigError(
            f"config key 'job.container.count' is {container_count} but the job has only {len(tasks)} "
            f"task(s); use at most {len(tasks)} containers"
        )
    assigned: dict[str, dict[TaskName, TaskModel]] = {str(i): {} for i in range(container_count)}
    for index, name in enumerate(sorted(tasks, key=lambda n: n.sort_key())):
        assigned[str(index % container_count)][name] = TaskModel(name, tasks[name])
    return {cid: ContainerModel(cid, members) for cid, members in assigned.items()}
