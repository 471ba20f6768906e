"""Local store layout: directories per store and task, checkpoint directories by CheckpointId, and
the files that describe them."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.checkpoint.checkpoint import CheckpointId, CheckpointV2
from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from millstream.model import SystemStreamPartition
from millstream.storage.layout import (
    LIVE,
    ListedOnce,
    StoreDirListing,
    StoreLayout,
    attempt_dir,
    checkpoint_dir,
    checkpoint_dirs,
    copy_dir,
    delete_checkpoint_dirs,
    read_checkpoint_file,
    read_offset_file,
    stale_attempt_dirs,
    task_dir_name,
    write_checkpoint_file,
    write_offset_file,
)


def test_defaults_live_under_the_job_dir(tmp_path: Path) -> None:
    layout = StoreLayout.of(Settings({"job.data.dir": str(tmp_path), "job.name": "j"}))
    assert (
        layout.store_dir("counts", "Partition 0", logged=True) == tmp_path / "jobs/j-1/stores/logged/counts/Partition_0"
    )
    assert layout.non_logged_base == tmp_path / "jobs/j-1/stores/non-logged"


def test_base_dirs_are_configurable(tmp_path: Path) -> None:
    config = Settings(
        {"job.logged.store.base.dir": str(tmp_path / "L"), "job.non-logged.store.base.dir": str(tmp_path / "N")}
    )
    layout = StoreLayout.of(config)
    assert layout.store_dir("s", "Partition 1", logged=False) == tmp_path / "N/s/Partition_1"


def test_a_base_dir_starting_with_an_environment_variable_is_expanded_on_the_host_that_runs_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = prepare(
        Settings(
            {
                "job.data.dir": str(tmp_path / "data"),
                "task.class": "tests.jobs:PassThrough",
                "task.inputs": "log.in",
                "job.logged.store.base.dir": "$HOST_DISK/stores",
                "job.non-logged.store.base.dir": "${HOST_DISK}/scratch",
            }
        )
    )
    assert config["job.logged.store.base.dir"] == "$HOST_DISK/stores"  # not resolved against the driver's paths
    monkeypatch.setenv("HOST_DISK", str(tmp_path / "disk-1"))
    layout = StoreLayout.of(config)
    assert layout.store_dir("s", "Partition 1", logged=True) == tmp_path / "disk-1/stores/s/Partition_1"
    assert layout.non_logged_base == tmp_path / "disk-1/scratch"
    monkeypatch.delenv("HOST_DISK")
    with pytest.raises(ConfigError, match=r"config key 'job\.logged\.store\.base\.dir' is '\$HOST_DISK/stores', but"):
        StoreLayout.of(config)


def test_task_names_become_safe_directory_names() -> None:
    assert task_dir_name("SystemStreamPartition [log, a/b, 0]") == "SystemStreamPartition__log__a_b__0_"


def test_checkpoint_dirs_are_found_in_commit_order_and_leftovers_deleted(tmp_path: Path) -> None:
    store = tmp_path / "counts" / "Partition_0"
    store.mkdir(parents=True)
    ids = [CheckpointId(2, 0), CheckpointId(1, 5), CheckpointId(1, 10)]
    for checkpoint_id in ids:
        checkpoint_dir(store, checkpoint_id).mkdir()
    (tmp_path / "counts" / "Partition_0-3-0.tmp").mkdir()  # a half-made RocksDB checkpoint
    (tmp_path / "counts" / "Partition_01-1-1").mkdir()  # another task's
    assert list(checkpoint_dirs(store)) == sorted(ids)
    delete_checkpoint_dirs(store, keep=CheckpointId(2, 0))
    assert sorted(p.name for p in (tmp_path / "counts").iterdir()) == [
        "Partition_0", "Partition_0-2-0", "Partition_01-1-1",
    ]  # fmt: skip


def test_offset_and_checkpoint_files_round_trip(tmp_path: Path) -> None:
    ssp = SystemStreamPartition("log", "changelog", 3)
    write_offset_file(tmp_path, {ssp: "17"})
    assert read_offset_file(tmp_path) == {ssp: "17"}
    checkpoint = CheckpointV2(CheckpointId(1, 2), {}, {"b": {"s": "m"}})
    write_checkpoint_file(tmp_path, checkpoint)
    assert read_checkpoint_file(tmp_path) == checkpoint
    (tmp_path / "CHECKPOINT-V2").write_bytes(b"garbage")
    assert read_checkpoint_file(tmp_path) is None


def test_copy_links_sst_files_and_copies_the_rest(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    (source / "000001.sst").write_bytes(b"sst")
    (source / "MANIFEST-000001").write_bytes(b"manifest")
    copy_dir(source, tmp_path / "dst")
    assert (tmp_path / "dst" / "000001.sst").stat().st_ino == (source / "000001.sst").stat().st_ino
    assert (tmp_path / "dst" / "MANIFEST-000001").stat().st_ino != (source / "MANIFEST-000001").stat().st_ino


@pytest.mark.parametrize("listing", [LIVE, ListedOnce()], ids=["listed-live", "listed-once"])
def test_an_attempts_directory_shares_the_tasks_checkpoint_directories_and_finds_the_others_stale(
    tmp_path: Path, listing: StoreDirListing
) -> None:
    base = tmp_path / "counts" / "Partition_0"
    mine = attempt_dir(base, 2, 5)
    assert mine.name == "Partition_0@2.5"
    checkpoint_id = CheckpointId.create()
    assert checkpoint_dir(mine, checkpoint_id) == checkpoint_dir(base, checkpoint_id)
    for directory in (
        base,
        mine,
        attempt_dir(base, 2, 4),
        checkpoint_dir(base, checkpoint_id),
        tmp_path / "counts" / "Partition_01",
    ):
        directory.mkdir(parents=True)
    (tmp_path / "counts" / "Partition_0@1.9.restoring").mkdir()
    (tmp_path / "counts" / "Partition_0@owner").touch()
    assert checkpoint_dirs(mine, listing) == {checkpoint_id: checkpoint_dir(base, checkpoint_id)}
    assert [path.name for path in stale_attempt_dirs(mine, listing)] == [
        "Partition_0",
        "Partition_0@1.9.restoring",
        "Partition_0@2.4",
    ]
    delete_checkpoint_dirs(mine, listing=listing)
    assert not checkpoint_dir(base, checkpoint_id).exists() and mine.is_dir()
    assert checkpoint_dirs(mine, listing) == {}, "a deleted directory is never found again"


def test_a_directory_listed_once_answers_from_its_first_listing(tmp_path: Path) -> None:
    listing = ListedOnce()
    for name in ("Partition_1-1-1", "Partition_1@owner", "Partition_10-1-1", "Partition_2-1-1"):
        (tmp_path / name).mkdir()
    assert listing.starting_with(tmp_path, "Partition_1-") == ["Partition_1-1-1"]
    (tmp_path / "Partition_1-2-2").mkdir()  # made after the listing: this container's own, never a leftover
    assert listing.starting_with(tmp_path, "Partition_1") == [
        "Partition_1-1-1",
        "Partition_10-1-1",
        "Partition_1@owner",
    ]
    assert listing.starting_with(tmp_path / "missing", "Partition_1") == []
