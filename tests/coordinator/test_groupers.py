import pytest

from millstream.coordinator.groupers import (
    GroupByPartition,
    GroupBySystemStreamPartition,
    group_containers,
    group_tasks,
    grouper_for,
)
from millstream.errors import ConfigError
from millstream.model import SystemStreamPartition as SSP
from millstream.model import TaskName


def ssps(stream: str, count: int, system: str = "log") -> set[SSP]:
    return {SSP(system, stream, p) for p in range(count)}


def test_group_by_partition_puts_equal_partitions_of_all_streams_in_one_task():
    tasks = group_tasks(GroupByPartition(), ssps("a", 2) | ssps("b", 2), set())
    assert tasks == {
        TaskName("Partition 0"): frozenset({SSP("log", "a", 0), SSP("log", "b", 0)}),
        TaskName("Partition 1"): frozenset({SSP("log", "a", 1), SSP("log", "b", 1)}),
    }


def test_group_by_ssp_makes_one_task_per_partition_named_as_samza():
    tasks = group_tasks(GroupBySystemStreamPartition(), ssps("a", 2), set())
    assert set(tasks) == {"SystemStreamPartition [log, a, 0]", "SystemStreamPartition [log, a, 1]"}


def test_broadcast_partitions_go_to_every_task_and_form_no_task_of_their_own():
    broadcast = {SSP("log", "lookup", 0)}
    tasks = group_tasks(GroupByPartition(), ssps("a", 3) | broadcast, broadcast)
    assert len(tasks) == 3
    assert all(SSP("log", "lookup", 0) in members for members in tasks.values())


def test_tasks_spread_round_robin_in_numeric_task_order():
    tasks = group_tasks(GroupByPartition(), ssps("a", 12), set())
    containers = group_containers(tasks, 2)
    assert sorted(containers["0"].tasks, key=lambda n: n.sort_key()) == [
        TaskName(f"Partition {p}") for p in (0, 2, 4, 6, 8, 10)
    ]
    assert len(containers["1"].tasks) == 6


def test_more_containers_than_tasks_is_a_config_error_naming_the_key():
    with pytest.raises(ConfigError, match=r"job\.container\.count"):
        group_containers(group_tasks(GroupByPartition(), ssps("a", 1), set()), 2)


def test_unknown_grouper_names_the_accepted_ones():
    with pytest.raises(ConfigError, match="GroupBySystemStreamPartition"):
        grouper_for("GroupByMoonPhase")


def test_samza_grouper_factory_names_are_accepted():
    assert isinstance(
        grouper_for("org.apache.samza.container.grouper.stream.GroupByPartitionFactory"), GroupByPartition
    )
