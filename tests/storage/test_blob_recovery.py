"""Stateful blob-store jobs in-process whose snapshots lost blobs (deleted from the blob store by hand or
by a lifecycle rule) or that dropped a store from the blob store: the job goes on from what remains,
checkpoints a whole snapshot with the old input offsets at once, and never leaks the blobs of stores it
no longer backs up — but deletes them only after a new checkpoint, so a rollback still finds them."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.checkpoint import CheckpointV2
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.model import SystemStreamPartition, TaskName
from millstream.storage.backends.blobstore.index import SnapshotIndex
from millstream.storage.backends.registry import state_backend_factory_class
from millstream.testing import InProcessRunner
from tests.helpers import fill, seal
from tests.storage.harness import restored_contents
from tests.storage.test_stateful_jobs import config_for, final_stores, prepare, reference, run_to_end, run_until_read

MARKER_KEY = state_backend_factory_class("blobstore", "test").marker_key()
TASKS = (TaskName("Partition 0"), TaskName("Partition 1"))
RECOVERY = "blob.store.restore.recover.missing.blobs.enabled"


def blob_root(config: Settings) -> Path:
    return Path(config["job.data.dir"]) / "blobs"


def blobs(config: Settings, store: str | None = None) -> set[str]:
    found = {p.relative_to(blob_root(config)).as_posix() for p in blob_root(config).rglob("*") if p.is_file()}
    return {b for b in found if store is None or f"/{store}/" in b}


def checkpoints(config: Settings) -> dict[TaskName, CheckpointV2]:
    found = checkpoint_manager(config, metadata_store(config)).read_all()
    assert all(isinstance(c, CheckpointV2) for c in found.values())
    return found  # type: ignore[return-value]


def index_of(config: Settings, checkpoint: CheckpointV2, store: str = "counts") -> tuple[str, SnapshotIndex]:
    blob_id = checkpoint.state_checkpoint_markers[MARKER_KEY][store]
    return blob_id, SnapshotIndex.from_bytes((blob_root(config) / blob_id).read_bytes(), blob_id)


def input_offset(checkpoint: CheckpointV2, partition: int) -> int:
    offset = checkpoint.offsets[SystemStreamPartition("log", "in", partition)]
    assert offset is not None
    return int(offset)


def committed_run(config: Settings) -> dict[TaskName, CheckpointV2]:
    """Run until every input is read and checkpointed; the tasks' last checkpoints."""
    prepare(config)
    run_until_read(config, 120)
    return checkpoints(config)


def delete_index_blobs(config: Settings, before: dict[TaskName, CheckpointV2]) -> list[str]:
    deleted = [index_of(config, before[task])[0] for task in TASKS]
    for blob_id in deleted:
        (blob_root(config) / blob_id).unlink()
    return deleted


def delete_an_sst_blob(config: Settings, before: dict[TaskName, CheckpointV2]) -> list[str]:
    deleted = []
    for task in TASKS:
        _, index = index_of(config, before[task])
        victim = next(f for f in index.dir_index.files_present if f.file_name.endswith(".sst"))
        (blob_root(config) / victim.blobs[0].blob_id).unlink()
        deleted.append(victim.blobs[0].blob_id)
    return deleted


def lose_local_state(config: Settings) -> None:
    shutil.rmtree(Path(config["job.data.dir"]) / "jobs" / "test-1" / "stores")


def checkpointed_state(before: dict[TaskName, CheckpointV2]) -> dict[str, int]:
    """What the stores held at ``before``: ``k<p>`` counts partition p's messages up to its offset."""
    return {f"k{p}": input_offset(before[task], p) + 1 for p, task in enumerate(TASKS)}


def assert_new_hosts_restore(config: Settings, tmp_path: Path, expected: dict[str, int]) -> None:
    for p, task in enumerate(TASKS):
        want = {f"k{p}": expected[f"k{p}"]} if f"k{p}" in expected else {}
        assert restored_contents(config, task, tmp_path / f"new-host-{p}") == want


def test_a_deleted_snapshot_index_is_recovered_from_the_local_copy_and_the_state_stays_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_for(tmp_path, "blobstore")
    before = committed_run(config)
    deleted = delete_index_blobs(config, before)
    written = {(p, v) for p in range(2) for v in range(100)}
    fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    with caplog.at_level(logging.WARNING):
        run_to_end(config)
    assert final_stores(config) == reference(written) == {"k0": 100, "k1": 100}
    assert all(blob_id in caplog.text for blob_id in deleted)
    assert_new_hosts_restore(config, tmp_path, {"k0": 100, "k1": 100})


def test_a_deleted_snapshot_index_without_a_local_copy_starts_empty_and_resumes_at_the_checkpointed_offsets(
    tmp_path: Path,
) -> None:
    config = config_for(tmp_path, "blobstore")
    before = committed_run(config)
    delete_index_blobs(config, before)
    lose_local_state(config)  # another host
    fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    run_to_end(config)
    lost = checkpointed_state(before)
    expected = {f"k{p}": 100 - lost[f"k{p}"] for p in range(2)}  # only what came after the checkpoint
    assert final_stores(config) == expected
    assert_new_hosts_restore(config, tmp_path, expected)


def test_after_a_lost_snapshot_index_a_new_checkpoint_with_the_old_input_offsets_is_written_at_start(
    tmp_path: Path,
) -> None:
    config = config_for(tmp_path, "blobstore")
    before = committed_run(config)
    deleted = set(delete_index_blobs(config, before))
    seal(config, "in")  # no new input: nothing but the recovery makes the job commit
    run_to_end(config)
    after = checkpoints(config)
    for task in TASKS:
        assert after[task].checkpoint_id != before[task].checkpoint_id
        assert after[task].offsets == before[task].offsets
        new_index, index = index_of(config, after[task])
        assert new_index not in deleted
        assert blobs(config) >= {new_index, *index.dir_index.blobs_present()}
    assert_new_hosts_restore(config, tmp_path, checkpointed_state(before))


def test_with_recovery_off_a_deleted_snapshot_index_fails_the_job_naming_the_blob(tmp_path: Path) -> None:
    config = config_for(tmp_path, "blobstore")
    before = committed_run(config)
    deleted = delete_index_blobs(config, before)
    seal(config, "in")
    result = InProcessRunner(config.with_overrides({RECOVERY: "false"})).run(timeout=60)
    assert result.outcome == "failed"
    assert result.error is not None
    assert any(blob_id in result.error for blob_id in deleted) and f"{RECOVERY} is false" in result.error


def test_a_snapshot_that_lost_a_file_is_uploaded_whole_again_so_a_new_host_can_restore_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_for(tmp_path, "blobstore")
    before = committed_run(config)
    deleted = delete_an_sst_blob(config, before)  # the local copy still has the file
    seal(config, "in")
    with caplog.at_level(logging.WARNING):
        run_to_end(config)
    assert all(blob_id in caplog.text for blob_id in deleted)
    assert final_stores(config) == checkpointed_state(before)
    assert_new_hosts_restore(config, tmp_path, checkpointed_state(before))


def test_a_snapshot_that_lost_a_file_without_a_local_copy_starts_empty_naming_the_blob(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_for(tmp_path, "blobstore")
    before = committed_run(config)
    deleted = delete_an_sst_blob(config, before)
    lose_local_state(config)
    seal(config, "in")
    with caplog.at_level(logging.WARNING):
        run_to_end(config)
    assert all(blob_id in caplog.text for blob_id in deleted)
    assert final_stores(config) == {}
    assert {task: c.offsets for task, c in checkpoints(config).items()} == {t: c.offsets for t, c in before.items()}
    assert_new_hosts_restore(config, tmp_path, {})


EXTRA_STORE: dict[str, Any] = {
    "stores__extra__factory": "rocksdb",
    "stores__extra__backup__factories": "blobstore",
}


def test_a_store_removed_from_the_config_keeps_its_blobs_until_a_new_checkpoint_then_loses_them(
    tmp_path: Path,
) -> None:
    with_extra = config_for(tmp_path, "blobstore", **EXTRA_STORE)
    prepare(with_extra)
    run_until_read(with_extra, 120)
    assert blobs(with_extra, "extra")
    without = config_for(tmp_path, "blobstore")
    run_until_read(without, 120)  # nothing new to read: no checkpoint, so a rollback could still restore
    assert blobs(without, "extra")
    written = {(p, v) for p in range(2) for v in range(100)}
    fill(without, "in", 2, 40, start=60)
    seal(without, "in")
    run_to_end(without)
    assert blobs(without, "extra") == set()
    assert final_stores(without) == reference(written)
    after = checkpoints(without)
    assert {blob for task in TASKS for blob in (index_of(without, after[task])[0],)} <= blobs(without, "counts")


def test_a_store_whose_backup_moved_off_the_blob_store_loses_its_blobs_after_the_first_new_checkpoint(
    tmp_path: Path,
) -> None:
    config = config_for(tmp_path, "blobstore")
    prepare(config)
    run_until_read(config, 120)
    assert blobs(config, "counts")
    moved = config.with_overrides(
        {
            "stores.counts.backup.factories": "changelog",
            "stores.counts.restore.factories": "blobstore,changelog",
            "stores.counts.changelog": "log.counts-changelog",
        }
    )
    written = {(p, v) for p in range(2) for v in range(100)}
    fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    run_to_end(moved)
    assert final_stores(moved) == reference(written) == {"k0": 100, "k1": 100}
    assert blobs(moved) == set()
