"""A container's start lists each store's directory once, however many tasks it restores: the directory holds
every task's working, owner and checkpoint directories, so a listing per task made a start cost tasks² (issue
40). What earlier attempts left there still goes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.contracts.systems import WriterToken
from millstream.runtime.services import ContainerServices
from millstream.storage.layout import attempt_dir, checkpoint_dir
from millstream.storage.managers.stores import ContainerStorageManager
from tests.storage.harness import StateHarness, state_config

TASKS = 4


def listings_of(directory: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every listing of ``directory`` from now on (``os.listdir``, which both the live and the once-only listings
    use), as the list returned, which grows."""
    listed: list[Path] = []
    listdir = os.listdir

    def counting(path: str | os.PathLike[str] = ".") -> list[str]:
        if Path(path) == directory:
            listed.append(Path(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", counting)
    return listed


def test_a_container_start_lists_the_shared_store_directory_once_and_still_deletes_every_tasks_leftovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog"), partitions=TASKS)
    assert len(harness.model.tasks) == TASKS
    services = ContainerServices(harness.config, writer=WriterToken("test-1", "0", 1, 2))
    container = ContainerStorageManager(harness.config, harness.model, "0", harness.metadata, services)
    storages = {task: container.task_storage(task, model) for task, model in harness.model.tasks.items()}
    working = {
        task: storage.backend_context(["counts"]).stores["counts"].store_dir
        for task, storage in storages.items()
        if storage
    }
    shared = next(iter(working.values())).parent
    leftovers = []
    for store_dir in working.values():
        leftovers += [attempt_dir(store_dir, 1, 1), checkpoint_dir(store_dir, CheckpointId.create())]
    for leftover in leftovers:
        leftover.mkdir(parents=True)  # what attempt 1 left: a working directory and a snapshot per task
    listed = listings_of(shared, monkeypatch)
    container.restore({task: (storage, None) for task, storage in storages.items() if storage})
    assert listed == [shared], f"{len(listed)} listings of the directory every task's stores share"
    assert [leftover for leftover in leftovers if leftover.exists()] == []
    for storage in storages.values():
        assert storage is not None
        storage.close()
    container.close()
    services.close()


def test_the_first_commits_look_for_zombie_snapshots_in_one_listing_taken_after_every_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog"), partitions=TASKS)
    services = ContainerServices(harness.config, writer=WriterToken("test-1", "0", 1, 2))
    container = ContainerStorageManager(harness.config, harness.model, "0", harness.metadata, services)
    storages = {task: container.task_storage(task, model) for task, model in harness.model.tasks.items()}
    container.restore({task: (storage, None) for task, storage in storages.items() if storage})
    working = [
        storage.backend_context(["counts"]).stores["counts"].store_dir for storage in storages.values() if storage
    ]
    zombies = [checkpoint_dir(store_dir, CheckpointId.create()) for store_dir in working]
    for zombie in zombies:
        zombie.mkdir(parents=True)  # a snapshot made by an older attempt of each task, not seen at the start
    shared = working[0].parent
    listed = listings_of(shared, monkeypatch)
    for storage in storages.values():
        assert storage is not None
        storage.cleanup(CheckpointId.create(), {})
        storage.cleanup(CheckpointId.create(), {})  # later cleanups list nothing
    assert listed == [shared], f"{len(listed)} listings of the directory every task's stores share"
    assert [zombie for zombie in zombies if zombie.exists()] == []
    for storage in storages.values():
        assert storage is not None
        storage.close()
    container.close()
    services.close()
