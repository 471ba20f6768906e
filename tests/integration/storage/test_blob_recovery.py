"""Lost snapshot blobs and dropped stores through the S3 and Azure emulators: a job whose snapshot
index was deleted goes on with its state and leaves nothing of the lost snapshot behind, and a store
removed from the config leaves no blob behind once the job has checkpointed without it."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.contracts.blobstore import BlobStore
from millstream.storage.backends.blobstore.index import SnapshotIndex
from tests.helpers import fill, seal
from tests.integration.storage.conftest import BlobTarget
from tests.integration.storage.test_blob_stores import MARKER_KEY, store_for
from tests.storage.test_blob_recovery import EXTRA_STORE, TASKS, checkpoints
from tests.storage.test_stateful_jobs import config_for, final_stores, prepare, run_to_end, run_until_read

pytestmark = pytest.mark.integration


def referenced(config: Settings, remote: BlobStore) -> set[str]:
    """Every blob the tasks' last checkpoints need."""
    needed: set[str] = set()
    for checkpoint in checkpoints(config).values():
        index_blob = checkpoint.state_checkpoint_markers[MARKER_KEY]["counts"]
        sink = io.BytesIO()
        remote.get(index_blob, sink)
        needed |= {index_blob, *SnapshotIndex.from_bytes(sink.getvalue(), index_blob).dir_index.blobs_present()}
    return needed


def test_a_deleted_snapshot_index_in_the_emulator_is_recovered_and_nothing_of_it_is_left(
    tmp_path: Path, blob_target: BlobTarget, bucket_name: Callable[[], str]
) -> None:
    config = config_for(tmp_path, "blobstore", **blob_target.config(bucket_name()))
    remote = store_for(
        blob_target, config["blob.store.s3.bucket" if blob_target.kind == "s3" else "blob.store.azure.container"]
    )
    prepare(config)
    run_until_read(config, 120)
    before = checkpoints(config)
    for task in TASKS:
        remote.delete(before[task].state_checkpoint_markers[MARKER_KEY]["counts"])
    fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    run_to_end(config)
    assert final_stores(config) == {"k0": 100, "k1": 100}
    assert set(remote.list("")) == referenced(config, remote)
    remote.close()


def test_a_store_removed_from_the_config_leaves_no_blob_in_the_emulator(
    tmp_path: Path, blob_target: BlobTarget, bucket_name: Callable[[], str]
) -> None:
    target = blob_target.config(bucket_name())
    with_extra = config_for(tmp_path, "blobstore", **target, **EXTRA_STORE)
    remote = store_for(
        blob_target, with_extra["blob.store.s3.bucket" if blob_target.kind == "s3" else "blob.store.azure.container"]
    )
    prepare(with_extra)
    run_until_read(with_extra, 120)
    assert any("/extra/" in blob for blob in remote.list(""))
    without = config_for(tmp_path, "blobstore", **target)
    fill(without, "in", 2, 40, start=60)
    seal(without, "in")
    run_to_end(without)
    assert final_stores(without) == {"k0": 100, "k1": 100}
    assert set(remote.list("")) == referenced(without, remote)
    remote.close()
