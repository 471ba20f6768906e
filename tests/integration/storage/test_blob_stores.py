"""The S3 and Azure blob stores against their emulators (moto, Azurite): the blob store contract, and
the blob-store state backend backing up, cleaning up and restoring through them."""

from __future__ import annotations

import io
import os
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.contracts.blobstore import BlobNotFoundError, BlobStore, blob_store
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.storage.backends.blobstore.index import SnapshotIndex
from millstream.storage.backends.registry import state_backend_factory_class
from millstream.storage.errors import StateRestoreError
from millstream.storage.layout import checkpoint_dirs
from millstream.testing import InProcessRunner, read_stream
from tests.helpers import create_stream, fill, seal
from tests.integration.storage.conftest import BlobTarget
from tests.storage.harness import StateHarness, state_config

pytestmark = pytest.mark.integration

MARKER_KEY = state_backend_factory_class("blobstore", "test").marker_key()


def store_for(target: BlobTarget, bucket: str) -> BlobStore:
    values = {key.replace("__", "."): value for key, value in target.config(bucket).items()}
    store = blob_store(prepare(Settings(values)))
    store.create()
    return store


def test_put_get_list_delete_round_trip(blob_target: BlobTarget, bucket_name: Callable[[], str]) -> None:
    store = store_for(blob_target, bucket_name())
    payload = os.urandom(3 << 20)
    assert store.put("job/t/s/1-1/a.sst", io.BytesIO(payload), len(payload)) == "job/t/s/1-1/a.sst"
    store.put("job/t/s/1-1/empty", io.BytesIO(b""), 0)
    store.put("job/t/other/x", io.BytesIO(b"x"), 1)
    sink = io.BytesIO()
    store.get("job/t/s/1-1/a.sst", sink)
    assert sink.getvalue() == payload
    assert store.list("job/t/s/") == ["job/t/s/1-1/a.sst", "job/t/s/1-1/empty"]
    store.delete("job/t/s/1-1/a.sst")
    store.delete("job/t/s/1-1/a.sst")
    with pytest.raises(BlobNotFoundError, match=r"job/t/s/1-1/a\.sst"):
        store.get("job/t/s/1-1/a.sst", io.BytesIO())
    store.create()  # idempotent
    store.close()


def harness(tmp_path: Path, target: BlobTarget, bucket: str) -> StateHarness:
    return StateHarness(state_config(tmp_path, "blobstore", **target.config(bucket)))


def test_backup_cleanup_and_restore_through_the_emulator(
    tmp_path: Path, blob_target: BlobTarget, bucket_name: Callable[[], str]
) -> None:
    bucket = bucket_name()
    h = harness(tmp_path, blob_target, bucket)
    remote = store_for(blob_target, bucket)
    opened = h.open()
    opened.store.put_all({f"k{i:05d}": i for i in range(2000)})
    h.commit(opened)
    opened.store.put_all({f"k{i:05d}": -i for i in range(100)})
    checkpoint = h.commit(opened)
    assert checkpoint is not None
    opened.store.put("after", 1)  # uncommitted
    h.commit(opened, stop_after="upload")  # orphans: uploaded, never checkpointed
    h.checkpoint = checkpoint
    store_dir = opened.storage.backend_context(["counts"]).stores["counts"].store_dir
    opened.storage.close()
    opened.container.close()
    for directory in checkpoint_dirs(store_dir).values():
        shutil.rmtree(directory)  # another host: nothing local

    restored = h.open()
    expected = {f"k{i:05d}": (-i if i < 100 else i) for i in range(2000)}
    assert dict(restored.store.all()) == expected
    index_blob = checkpoint.state_checkpoint_markers[MARKER_KEY]["counts"]
    sink = io.BytesIO()
    remote.get(index_blob, sink)
    index = SnapshotIndex.from_bytes(sink.getvalue(), "test")
    assert set(remote.list("")) == {index_blob, *index.dir_index.blobs_present()}  # orphans collected
    restored.close()
    remote.close()


def test_a_corrupted_blob_fails_the_restore_naming_the_file(
    tmp_path: Path, blob_target: BlobTarget, bucket_name: Callable[[], str]
) -> None:
    bucket = bucket_name()
    h = harness(tmp_path, blob_target, bucket)
    opened = h.open()
    opened.store.put_all({f"k{i}": i for i in range(100)})
    checkpoint = h.commit(opened)
    assert checkpoint is not None
    store_dir = opened.storage.backend_context(["counts"]).stores["counts"].store_dir
    opened.storage.close()
    opened.container.close()
    for directory in checkpoint_dirs(store_dir).values():
        shutil.rmtree(directory)
    remote = store_for(blob_target, bucket)
    sink = io.BytesIO()
    remote.get(checkpoint.state_checkpoint_markers[MARKER_KEY]["counts"], sink)
    index = SnapshotIndex.from_bytes(sink.getvalue(), "test")
    victim = next(f for f in index.dir_index.files_present if f.file_name.endswith(".sst"))
    original = io.BytesIO()
    remote.get(victim.blobs[0].blob_id, original)
    tampered = bytearray(original.getvalue())
    tampered[-1] ^= 0xFF
    remote.put(victim.blobs[0].blob_id, io.BytesIO(bytes(tampered)), len(tampered))
    with pytest.raises(StateRestoreError, match=rf"task 'Partition 0' store 'counts': file '{victim.file_name}'"):
        h.open()
    remote.close()


def test_a_stateful_job_restarts_from_the_emulator_and_matches_the_reference(
    tmp_path: Path, blob_target: BlobTarget, bucket_name: Callable[[], str]
) -> None:
    config = state_config(
        tmp_path,
        "blobstore",
        task="tests.storage.jobs:CountPerKeyReportingAtEnd",
        task__commit__ms=100,
        **blob_target.config(bucket_name()),
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    written = fill(config, "in", 2, 50)
    first = InProcessRunner(config).run(timeout=10)  # unsealed input: stopped by the timeout, commits
    assert first.outcome == "stopped", first.error
    written |= fill(config, "in", 2, 30, start=50)
    seal(config, "in")
    shutil.rmtree(Path(config["job.data.dir"]) / "jobs" / "test-1" / "stores")  # a new host: restore by download
    second = InProcessRunner(config).run(timeout=120)
    assert second.outcome == "finished", second.error
    stores: dict[str, int] = {}
    for _, value in read_stream(config, SystemStream("log", "out"))[0]:
        if "store" in value:
            stores.update(value["store"])
    assert stores == dict(Counter(f"k{p}" for p, _ in written)) == {"k0": 80, "k1": 80}
