"""Stateful jobs end to end in-process (the containers of the Spark runner, in threads): stores reached
from tasks, state that survives restarts on either backend, checkpoint version migration and rollback,
and failures that name their cause."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.checkpoint import CheckpointV1, CheckpointV2
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.blobstore import BlobStore, BlobStoreFactory
from millstream.embedded.local_blobstore import LocalBlobStore
from millstream.errors import MillstreamError
from millstream.model import SystemStream, TaskName
from millstream.runtime.task_instance import ContainerContext
from millstream.testing import InProcessRunner, read_stream
from tests.helpers import create_stream, fill, seal
from tests.storage.harness import state_config

TASK_CLASS = "tests.storage.jobs:CountPerKeyReportingAtEnd"


def config_for(tmp_path: Path, backend: str, **extra: Any) -> Settings:
    return state_config(tmp_path, backend, task=TASK_CLASS, task__commit__ms=50, job__container__count=2, **extra)


def reference(written: set[tuple[int, int]]) -> dict[str, int]:
    """What the stores must hold: messages per key (``fill`` keys partition p's messages ``k<p>``)."""
    return dict(Counter(f"k{partition}" for partition, _ in written))


def final_stores(config: Settings) -> dict[str, int]:
    merged: dict[str, int] = {}
    for _, value in read_stream(config, SystemStream("log", "out"))[0]:
        if "store" in value:
            merged.update(value["store"])
    return merged


def read_everything(config: Settings, total: int) -> bool:
    checkpoints = checkpoint_manager(config, metadata_store(config)).read_all()
    return (
        sum(
            int(o) + 1
            for c in checkpoints.values()
            for ssp, o in c.offsets.items()
            if ssp.stream == "in" and o is not None
        )
        >= total
    )


def run_until_read(config: Settings, total: int) -> None:
    runner = InProcessRunner(config)
    done = threading.Event()

    def stopper() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not done.is_set():
            if read_everything(config, total):
                break
            time.sleep(0.05)
        runner.request_stop()

    threading.Thread(target=stopper, daemon=True).start()
    result = runner.run(timeout=90)
    done.set()
    assert result.outcome == "stopped", result.error


def run_to_end(config: Settings) -> None:
    result = InProcessRunner(config).run(timeout=90)
    assert result.outcome == "finished", result.error


def prepare(config: Settings) -> set[tuple[int, int]]:
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    return fill(config, "in", 2, 60)


@pytest.mark.parametrize("backend", ["changelog", "blobstore", "both"])
def test_state_survives_a_restart_and_equals_the_reference(tmp_path: Path, backend: str) -> None:
    config = config_for(tmp_path, backend)
    written = prepare(config)
    run_until_read(config, 120)
    written |= fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    run_to_end(config)
    assert final_stores(config) == reference(written) == {"k0": 100, "k1": 100}


def test_a_stateful_job_writes_v1_with_changelog_offsets_and_v2_with_markers(tmp_path: Path) -> None:
    config = config_for(tmp_path, "both")
    prepare(config)
    seal(config, "in")
    run_to_end(config)
    store = metadata_store(config)
    v1 = checkpoint_manager(config.with_overrides({"task.checkpoint.read.versions": "1"}), store).read_all()
    v2 = checkpoint_manager(config, store).read_all()
    task = TaskName("Partition 0")
    v1_checkpoint, v2_checkpoint = v1[task], v2[task]
    assert isinstance(v1_checkpoint, CheckpointV1) and isinstance(v2_checkpoint, CheckpointV2)
    changelog_entry = next(o for ssp, o in v1_checkpoint.offsets.items() if ssp.stream == "counts-changelog")
    assert changelog_entry is not None and changelog_entry.startswith(f"{v2_checkpoint.checkpoint_id}:")
    assert set(v2_checkpoint.state_checkpoint_markers) == {
        "org.apache.samza.storage.KafkaChangelogStateBackendFactory",
        "org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory",
    }


def test_rollback_from_v2_to_v1_and_forward_again_keeps_the_state(tmp_path: Path) -> None:
    """Migrate (write 1,2, read 2), roll back (write 1, read 1), go forward again (read 2,1) with a stale
    V2 left behind: the newer V1 wins beyond the live max age, so no update is lost or applied twice."""
    v2_first = {"task.checkpoint.write.versions": "1,2", "task.checkpoint.read.versions": "2"}
    rolled_back = {"task.checkpoint.write.versions": "1", "task.checkpoint.read.versions": "1"}
    forward = {"task.checkpoint.write.versions": "1,2", "task.checkpoint.read.versions": "2,1",
               "task.live.checkpoint.max.age.ms": "0"}  # fmt: skip
    config = config_for(tmp_path, "changelog")
    written = prepare(config)
    run_until_read(config.with_overrides(v2_first), 120)
    written |= fill(config, "in", 2, 20, start=60)
    run_until_read(config.with_overrides(rolled_back), 160)
    written |= fill(config, "in", 2, 20, start=80)
    seal(config, "in")
    run_to_end(config.with_overrides(forward))
    assert final_stores(config) == reference(written) == {"k0": 100, "k1": 100}


class FailingBlobStore(LocalBlobStore):
    def put(self, name: str, source: Any, size: int) -> str:
        raise OSError("blob store unreachable")


class FailingBlobStoreFactory(BlobStoreFactory):
    def get_blob_store(self, config: Settings) -> BlobStore:
        return FailingBlobStore(Path(config["job.data.dir"]) / "blobs")


def test_a_failed_upload_fails_the_job_with_the_cause_naming_the_task(tmp_path: Path) -> None:
    config = config_for(tmp_path, "blobstore", blob__store__manager__factory=f"{__name__}:FailingBlobStoreFactory")
    prepare(config)
    seal(config, "in")
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "failed"
    assert result.error is not None
    assert "CommitFailedError" in result.error and "task 'Partition" in result.error
    assert "blob store unreachable" in result.error


def test_a_task_asking_for_an_unknown_store_gets_an_error_naming_it() -> None:
    context = ContainerContext(TaskName("Partition 0"), Settings({}), frozenset(), "0", {})
    with pytest.raises(MillstreamError, match="task 'Partition 0' has no store 'nope'"):
        context.get_store("nope")


def test_a_blob_store_task_never_resumes_from_a_v1_written_without_its_v2(tmp_path: Path) -> None:
    """A crash between a commit's V1 and V2 writes leaves a V1 newer than any V2; a blob-store task must
    resume from the V2 (here: none, so from the start with empty stores), not from V1's offsets."""
    from millstream.checkpoint.base import WriterFence
    from millstream.checkpoint.metadata_store import MetadataStoreCheckpointManager
    from millstream.contracts import coordination
    from millstream.model import SystemStreamPartition

    config = config_for(tmp_path, "blobstore")
    written = prepare(config)
    seal(config, "in")
    store = metadata_store(config)
    store.init()
    coordination.publish_generation(store, 1)
    fence = WriterFence(1, "x", coordination.start_container_attempt(store, "x"))
    orphan_v1 = CheckpointV1({SystemStreamPartition("log", "in", 0): "29"})
    MetadataStoreCheckpointManager(store, fence).write_checkpoint(TaskName("Partition 0"), orphan_v1)
    run_to_end(config)
    assert final_stores(config) == reference(written)


class V1OnlyCheckpointManagerFactory:
    """A checkpoint manager that reads only V1, whatever the config says (as one that predates V2)."""

    def get_checkpoint_manager(self, config: Settings, store: Any, fence: Any = None) -> Any:
        from millstream.checkpoint.metadata_store import MetadataStoreCheckpointManager

        return MetadataStoreCheckpointManager(store, fence, read_versions=(1,))


def test_a_checkpoint_manager_that_cannot_read_v2_fails_a_blob_store_job_clearly(tmp_path: Path) -> None:
    from millstream.checkpoint.factory import CheckpointManagerFactory

    CheckpointManagerFactory.register(V1OnlyCheckpointManagerFactory)
    config = config_for(tmp_path, "blobstore", task__checkpoint__factory=f"{__name__}:V1OnlyCheckpointManagerFactory")
    prepare(config)
    first = InProcessRunner(config).run(timeout=5)
    assert first.outcome in ("stopped", "finished"), first.error
    second = InProcessRunner(config).run(timeout=30)
    assert second.outcome == "failed"
    assert second.error is not None and "cannot restore stores that only V2 checkpoints describe" in second.error
