"""The open-file limit checked when a container first uses a system whose config bounds its open files: the soft
limit raised when the hard one allows, a ``ConfigError`` naming the keys and the limit when it does not."""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.contracts.systems import FileBudget
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.open_files import DESCRIPTORS_PER_PARTITION
from millstream.errors import ConfigError
from millstream.runtime import file_limit
from millstream.runtime.services import ContainerServices

REPO = Path(__file__).resolve().parents[2]


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


def test_each_container_is_checked_on_its_own_and_its_systems_budgets_add_up(limit: tuple[int, int]) -> None:
    """Two containers of one process, each allowed about 60 % of the hard limit, both start: a pool's bound is what a
    container may reach, and summing the bounds failed several small containers that hold a few files. Within one
    container, two systems of 60 % each do not fit."""
    _, hard = limit
    keys = ("systems.log.consumer.open.partitions.max",)
    budget = FileBudget(hard * 6 // 10, keys)
    first, second = object(), object()
    try:
        file_limit.reserve(first, "log", budget)
        file_limit.reserve(second, "log", budget)
        with pytest.raises(ConfigError, match=r"systems\.log\.consumer\.open\.partitions\.max"):
            file_limit.reserve(first, "other", budget)
    finally:
        file_limit.release(first)
        file_limit.release(second)


def test_a_containers_budget_goes_with_its_services(limit: tuple[int, int], tmp_path: Path) -> None:
    """A container's services reserve the log's pools at its first use and release them at close."""
    _, hard = limit
    partitions = hard * 6 // 10 // DESCRIPTORS_PER_PARTITION
    config = Settings(
        {
            "job.name": "limits",
            "job.data.dir": str(tmp_path),
            "systems.log.admin.open.partitions.max": "1",
            "systems.log.producer.open.partitions.max": "1",
            "systems.log.consumer.open.partitions.max": str(partitions - 2),
        }
    )
    assert LogSystemFactory().file_budget("log", config).descriptors == partitions * DESCRIPTORS_PER_PARTITION
    services = ContainerServices(config, "0")
    try:
        services.factory("log")
        with pytest.raises(ConfigError, match=r"systems\.log\.admin\.open\.partitions\.max"):
            file_limit.reserve(services, "other", FileBudget(hard * 6 // 10, ("systems.other.pool",)))
        services.close()
        file_limit.reserve(services, "other", FileBudget(hard * 6 // 10, ("systems.other.pool",)))
    finally:
        file_limit.release(services)
        services.close()


class _CollectedOnlyByTheCycleCollector:
    """An owner in a reference cycle: only a garbage collection frees it, and runs its finalizers then."""

    def __init__(self) -> None:
        self.cycle = self


def test_an_owner_collected_while_another_reserves_neither_deadlocks_nor_keeps_its_budget(
    limit: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = FileBudget(10, ("systems.log.consumer.open.partitions.max",))
    dead = _CollectedOnlyByTheCycleCollector()
    file_limit.reserve(dead, "log", budget)
    dead_id = id(dead)
    del dead
    real = resource.getrlimit

    def collecting_first(which: int) -> tuple[int, int]:  # a collection while reserve holds its lock
        gc.collect()
        return real(which)

    monkeypatch.setattr(file_limit.resource, "getrlimit", collecting_first)
    live = _CollectedOnlyByTheCycleCollector()
    reserving = threading.Thread(target=file_limit.reserve, args=(live, "log", budget), daemon=True)
    reserving.start()
    reserving.join(30)
    assert not reserving.is_alive(), "reserve deadlocked on the collected owner's finalizer"
    monkeypatch.undo()
    file_limit.release(live)
    assert [key for key in file_limit._reserved if key[0] in (dead_id, id(live))] == []


def test_raising_to_the_hard_limit_gives_the_soft_limit_the_hard_ones_value_and_says_why(
    limit: tuple[int, int], caplog: pytest.LogCaptureFixture
) -> None:
    """What a JVM does at start, for a store whose table files have no bound."""
    _, hard = limit
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    with caplog.at_level("INFO", logger=file_limit.__name__):
        file_limit.raise_to_hard("store(s) counts")
        file_limit.raise_to_hard("store(s) counts")
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    raised = [record.getMessage() for record in caplog.records]
    assert raised == [f"raised the open-file limit (ulimit -n) from 256 to its hard limit {hard} for store(s) counts"]


SCRIPT = """
import json, resource, sys
from millstream.testing import TestRunner
tasks, soft, config = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
runner = TestRunner("tests.jobs:CountingTask", config)
runner.add_input("log.in", {p: [(p, i) for i in range(3)] for p in range(tasks)}, partitions=tasks)
result = runner.run(timeout=240)
print(json.dumps({"counts": [value["count"] for _, value in result.output("log.out")],
                  "limit": resource.getrlimit(resource.RLIMIT_NOFILE)}))
"""

SMALL_LOG_POOLS = {
    "systems.log.admin.open.partitions.max": "8",
    "systems.log.consumer.open.partitions.max": "16",
    "systems.log.producer.open.partitions.max": "16",
}
"""The embedded log's pools held small, so its budget does not raise the soft limit past what the stores need."""


def run_with_soft_limit(tmp_path: Path, tasks: int, soft: int, **store: str) -> dict[str, Any]:
    """``tasks`` tasks with a RocksDB store and its changelog each, run to the end in a process whose soft
    open-file limit starts at ``soft``: every task's count, and the limit at the end."""
    config = {
        **SMALL_LOG_POOLS,
        "stores.counts.factory": "rocksdb",
        "stores.counts.changelog": "log.counts-changelog",
        **{f"stores.counts.{key.replace('_', '.')}": value for key, value in store.items()},
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tasks), str(soft), json.dumps(config)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return outcome


@pytest.mark.parametrize("tasks", [80])
def test_a_container_whose_stores_outnumber_the_soft_limit_raises_it_to_the_hard_one_and_runs(
    limit: tuple[int, int], tmp_path: Path, tasks: int
) -> None:
    """80 RocksDB stores hold about 560 descriptors: a soft limit of 400 (above the log's small pools) failed the
    container's restore with 'Too many open files' where a JVM's container would have run at its hard limit."""
    _, hard = limit
    outcome = run_with_soft_limit(tmp_path, tasks, 400)
    assert outcome["counts"] == [3] * tasks, "every task counted its 3 messages"
    assert outcome["limit"] == [hard, hard]


def test_stores_with_a_bound_on_their_open_files_raise_the_soft_limit_to_what_the_bounds_add_up_to(
    limit: tuple[int, int], tmp_path: Path
) -> None:
    _, hard = limit
    outcome = run_with_soft_limit(tmp_path, 40, 400, rocksdb_max_open_files="30")
    assert outcome["counts"] == [3] * 40
    soft = outcome["limit"][0]
    assert 40 * 30 + file_limit.HEADROOM <= soft < hard, "raised for the bounded stores, not to the hard limit"
