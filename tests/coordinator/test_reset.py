"""``reset_job``: a stateful job reset runs again as from scratch, whichever backend keeps its state (changelog,
blob store or both); a dry run deletes nothing; a reset removes only the job's own blobs."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.blobstore import blob_store
from millstream.control.state import CONTROL_STATE_NAMESPACE
from millstream.coordinator.prepare import prepare
from millstream.coordinator.reset import ResetRefusedError, reset_job
from millstream.model import SystemStream
from millstream.storage.backends.blobstore.transfer import store_blob_prefix
from millstream.testing import InProcessRunner, read_stream
from tests.api.apps import app_config, messages
from tests.api.test_in_process import output, setup
from tests.helpers import seal
from tests.storage.test_stateful_jobs import config_for, final_stores, reference, run_to_end
from tests.storage.test_stateful_jobs import prepare as fill_input


def checkpointed_tasks(config: Settings) -> int:
    with metadata_store(config) as store, checkpoint_manager(config, store) as manager:
        manager.start()
        return len(manager.read_all())


def job_blobs(config: Settings) -> list[str]:
    store = blob_store(config)
    try:
        return store.list(store_blob_prefix(config, "", ""))
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["changelog", "blobstore", "both"])
def test_a_reset_job_runs_again_with_empty_stores_from_its_first_offsets(tmp_path: Path, backend: str) -> None:
    config = prepare(config_for(tmp_path, backend))
    written = fill_input(config)
    seal(config, "in")
    run_to_end(config)
    assert final_stores(config) == reference(written)

    dry = reset_job(config, dry_run=True)
    assert dry.checkpointed_tasks == ["Partition 0", "Partition 1"] and dry.local_dirs
    assert (SystemStream("log", "counts-changelog") in dry.streams) == (backend != "blobstore")
    assert bool(dry.blobs) == (backend != "changelog")
    assert checkpointed_tasks(config) == 2, "a dry run deletes nothing"

    reset_job(config)
    assert checkpointed_tasks(config) == 0
    assert not any(path.exists() for path in dry.local_dirs)
    assert job_blobs(config) == []
    assert reset_job(config, dry_run=True).empty, "nothing is left to reset"

    before = len(read_stream(config, SystemStream("log", "out"))[0])
    run_to_end(config)
    second_run = read_stream(config, SystemStream("log", "out"))[0][before:]
    stores: dict[str, int] = {}
    for _, value in second_run:
        stores.update(value.get("store", {}))
    assert stores == reference(written), "counted from zero, over every input message"


def test_a_reset_deletes_only_the_blobs_under_its_own_job_prefix(tmp_path: Path) -> None:
    config = prepare(config_for(tmp_path, "blobstore"))
    other = prepare(config_for(tmp_path, "blobstore", job__name="other"))
    store = blob_store(config)
    try:
        ours = store.put(f"{store_blob_prefix(config, 'Partition 0', 'counts')}x", io.BytesIO(b"1"), 1)
        theirs = store.put(f"{store_blob_prefix(other, 'Partition 0', 'counts')}x", io.BytesIO(b"2"), 1)
    finally:
        store.close()
    plan = reset_job(config)
    assert [ours] in plan.blobs.values()
    assert job_blobs(config) == [] and job_blobs(other) == [theirs]


def test_a_reset_of_a_running_job_is_refused_naming_its_running_containers(tmp_path: Path) -> None:
    config = prepare(config_for(tmp_path, "changelog"))
    with metadata_store(config) as store:
        store.init()
        coordination.publish_generation(store, 1)
        epoch = coordination.start_container_attempt(store, "0")
        assert coordination.report_container_status(store, "0", 1, epoch, {"generation": 1, "state": "running"})
    with pytest.raises(ResetRefusedError, match=r"job 'test' is running \(generation 1: container\(s\) 0 "):
        reset_job(config, dry_run=True)
    assert reset_job(config, dry_run=True, force=True).job == "test"


def test_a_reset_two_stage_job_keeping_its_control_state_in_the_metadata_store_delivers_everything_again(
    tmp_path: Path,
) -> None:
    config = Settings.of(app_config(tmp_path, "tests.api.apps:RepartitionPassThrough", job__container__count=2))
    data = {p: messages(p, 10) for p in range(2)}
    setup(config, data)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    first = sorted(m["n"] for m in output(config))

    plan = reset_job(config)
    assert CONTROL_STATE_NAMESPACE in plan.metadata, "the tasks' end-of-stream would end the next run at once"
    assert SystemStream("log", "test-1-by-user") in plan.streams
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "finished", result.error
    assert sorted(m["n"] for m in output(config)) == sorted(first + first), "every message delivered again"
