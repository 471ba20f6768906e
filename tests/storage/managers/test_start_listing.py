"""A container's start lists each store's directory once, however many tasks it restores: the directory holds
every task's working, owner and checkpoint directories, so a listing per task made a start cost tasks² (issue
40). What earlier attempts left there still goes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.storage.layout import attempt_dir, checkpoint_dir
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
    with harness.open_every_task() as every:
        working = {
            task: storage.backend_context(["counts"]).stores["counts"].store_dir
            for task, storage in every.storages.items()
        }
        shared = next(iter(working.values())).parent
        leftovers = []
        for store_dir in working.values():
            leftovers += [attempt_dir(store_dir, 1, 1), checkpoint_dir(store_dir, CheckpointId.create())]
        for leftover in leftovers:
            leftover.mkdir(parents=True)  # what attempt 1 left: a working directory and a snapshot per task
        listed = listings_of(shared, monkeypatch)
        every.restore()
        assert listed == [shared], f"{len(listed)} listings of the directory every task's stores share"
        assert [leftover for leftover in leftovers if leftover.exists()] == []


def test_the_first_commits_look_for_zombie_snapshots_in_one_listing_taken_after_every_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog"), partitions=TASKS)
    with harness.open_every_task() as every:
        every.restore()
        working = [
            storage.backend_context(["counts"]).stores["counts"].store_dir for storage in every.storages.values()
        ]
        zombies = [checkpoint_dir(store_dir, CheckpointId.create()) for store_dir in working]
        for zombie in zombies:
            zombie.mkdir(parents=True)  # a snapshot made by an older attempt of each task, not seen at the start
        shared = working[0].parent
        listed = listings_of(shared, monkeypatch)
        for storage in every.storages.values():
            storage.cleanup(CheckpointId.create(), {})
            storage.cleanup(CheckpointId.create(), {})  # later cleanups list nothing
        assert listed == [shared], f"{len(listed)} listings of the directory every task's stores share"
        assert [zombie for zombie in zombies if zombie.exists()] == []
