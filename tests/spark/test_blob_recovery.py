"""Blob-store recovery through the Spark runner, with a container SIGKILLed in the middle of it: a
snapshot index deleted from the blob store, and a store dropped from the config. A kill before the
first new checkpoint must neither lose the state the host still has nor delete what the last
checkpoint still names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.model import TaskName
from tests.helpers import fill, seal
from tests.spark.test_state import assert_no_orphaned_blobs, final_store_dumps, paused_at, run_and_kill
from tests.storage.harness import restored_contents
from tests.storage.test_blob_recovery import EXTRA_STORE, TASKS, blobs, checkpoints, delete_index_blobs
from tests.storage.test_stateful_jobs import config_for, prepare, run_until_read

pytestmark = pytest.mark.spark

WHOLE = {f"Partition {p}": {f"k{p}": 100} for p in range(2)}


def killed_at_first_upload(config: Settings, markers: Path) -> Settings:
    return config.with_overrides(
        {
            "task.commit.testing.pause.at": "after-upload",
            "task.commit.testing.pause.ms": "60000",
            "task.commit.testing.marker.dir": str(markers),
        }
    )


def test_a_sigkill_before_the_recovery_checkpoint_of_a_deleted_index_still_ends_with_the_whole_state(
    spark_local: Any, tmp_path: Path
) -> None:
    config = config_for(tmp_path, "blobstore")
    prepare(config)
    run_until_read(config, 120)
    before = checkpoints(config)
    delete_index_blobs(config, before)
    fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    markers = tmp_path / "markers"
    # the first upload of the run is a recovery commit: the kill comes before its checkpoint
    result = run_and_kill(killed_at_first_upload(config, markers), spark_local, paused_at(markers, "after-upload"))
    assert result.outcome == "finished", result.error
    assert max(c.epoch for c in result.containers) >= 2, "no container was retried"
    assert final_store_dumps(config) == WHOLE
    for p, task in enumerate(TASKS):
        assert checkpoints(config)[task].checkpoint_id != before[task].checkpoint_id
        assert restored_contents(config, task, tmp_path / f"new-host-{p}") == {f"k{p}": 100}
    assert_no_orphaned_blobs(config)


def test_a_sigkill_before_the_first_checkpoint_without_a_store_keeps_its_blobs_which_go_after_it(
    spark_local: Any, tmp_path: Path
) -> None:
    with_extra = config_for(tmp_path, "blobstore", **EXTRA_STORE)
    prepare(with_extra)
    run_until_read(with_extra, 120)
    kept = blobs(with_extra, "extra")
    assert kept
    without = config_for(tmp_path, "blobstore")
    fill(without, "in", 2, 40, start=60)
    seal(without, "in")
    markers = tmp_path / "markers"
    before = checkpoints(with_extra)
    at_kill: dict[str, Any] = {}
    probe = paused_at(markers, "after-upload")

    def victim() -> int | None:
        pid = probe()
        if pid is not None:  # blobs first: a checkpoint still old after this read was old during it
            at_kill["extra"] = blobs(without, "extra")
            at_kill["checkpoints"] = checkpoints(without)
        return pid

    result = run_and_kill(killed_at_first_upload(without, markers), spark_local, victim)
    assert result.outcome == "finished", result.error
    assert max(c.epoch for c in result.containers) >= 2, "no container was retried"
    not_yet = [
        (p, task)
        for p, task in enumerate(TASKS)
        if at_kill["checkpoints"][task].checkpoint_id == before[task].checkpoint_id
    ]
    assert not_yet, "the paused task had already checkpointed"
    for p, _ in not_yet:  # no new checkpoint yet: what the last one names is all still there
        own = {blob for blob in kept if f"/Partition_{p}/extra/" in f"/{blob}"}
        assert own and own <= at_kill["extra"]
    assert blobs(without, "extra") == set()
    assert final_store_dumps(without) == WHOLE
    assert_no_orphaned_blobs(without)
    for p, task in enumerate(TASKS):
        assert restored_contents(without, TaskName(str(task)), tmp_path / f"new-host-{p}") == {f"k{p}": 100}
