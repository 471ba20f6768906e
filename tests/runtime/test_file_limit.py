"""The open-file limit checked when a container first uses a system whose config bounds its open files: the soft
limit raised when the hard one allows, a ``ConfigError`` naming the keys and the limit when it does not."""

from __future__ import annotations

import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.config import Config
from millstream.errors import ConfigError
from millstream.runtime import file_limit
from millstream.runtime.services import ContainerServices
from millstream.systems.base import FileBudget
from millstream.systems.log.factory import DESCRIPTORS_PER_PARTITION, LogSystemFactory


@pytest.fixture
def limit() -> Iterator[tuple[int, int]]:
    """The limit as it was, restored after the test (lowering then raising the soft limit needs no privilege)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield before
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_a_budget_over_the_soft_limit_but_under_the_hard_one_raises_the_soft_limit(limit: tuple[int, int]) -> None:
    _, hard = limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))  # never the hard limit: it could not be raised back
    owner = object()
    try:
        file_limit.reserve(owner, "log", FileBudget(300, ("systems.log.consumer.open.partitions.max",)))
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (300 + file_limit.HEADROOM, hard)
    finally:
        file_limit.release(owner)


def test_a_budget_over_the_hard_limit_fails_naming_the_keys_and_the_limit(limit: tuple[int, int]) -> None:
    soft, hard = limit
    keys = ("systems.log.consumer.open.partitions.max", "systems.log.producer.open.partitions.max")
    with pytest.raises(ConfigError, match=rf"ulimit -n\) is {soft}, at most {hard}.*{keys[0]}, {keys[1]}"):
        file_limit.reserve(object(), "log", FileBudget(hard + 1, keys))
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == limit


def test_budgets_of_every_container_of_the_process_add_up_and_are_released_at_close(
    limit: tuple[int, int], tmp_path: Path
) -> None:
    """Two containers of one process, each allowed about 60 % of the hard limit: the second fails while the first
    holds its budget, and passes once the first closed."""
    _, hard = limit
    partitions = hard * 6 // 10 // DESCRIPTORS_PER_PARTITION
    config = Config(
        {
            "job.name": "limits",
            "job.data.dir": str(tmp_path),
            "systems.log.admin.open.partitions.max": "1",
            "systems.log.producer.open.partitions.max": "1",
            "systems.log.consumer.open.partitions.max": str(partitions - 2),
        }
    )
    assert LogSystemFactory().file_budget("log", config).descriptors == partitions * DESCRIPTORS_PER_PARTITION
    first = ContainerServices(config, "0")
    second = ContainerServices(config, "1")
    try:
        first.factory("log")
        with pytest.raises(ConfigError, match=r"systems\.log\.admin\.open\.partitions\.max"):
            second.factory("log")
        first.close()
        second.factory("log")
    finally:
        first.close()
        second.close()
