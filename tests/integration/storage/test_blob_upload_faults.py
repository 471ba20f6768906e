"""A blob-store commit whose uploads meet a network partition: the S3 emulator (moto) sits behind a black-hole
proxy that cuts it off in the middle of a commit's upload (testing pause point ``mid-upload``), so the rest
of the snapshot, its index last, times out. The upload fails naming the task and store, no checkpoint names
the incomplete snapshot, a restore gives the last durable checkpoint's state, and once the network heals the
next commit checkpoints everything."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from millstream.checkpoint.checkpoint import CheckpointId, CheckpointV2
from millstream.checkpoint.factory import checkpoint_manager
from millstream.storage.errors import StateBackupError
from tests.helpers import wait_until
from tests.integration.kafka.test_changelog_faults import checkpoint_writer, keys, restored_on_a_new_host
from tests.integration.network import BlackHoleProxy
from tests.integration.storage.conftest import BlobTarget
from tests.storage.harness import TASK, StateHarness, state_config

pytestmark = pytest.mark.integration

PAUSE_POINT = "mid-upload"
REQUEST_TIMEOUT_MS = 1000
"""``blob.store.s3.request.timeout.ms``: a request the black hole swallows is given up after a second (60 s by
default, three attempts each), so the upload fails within seconds."""


@pytest.fixture
def proxied_s3(moto_s3_target: BlobTarget) -> Iterator[tuple[BlobTarget, BlackHoleProxy]]:
    """The session's moto server, reached through a black-hole proxy of this test's own."""
    port = urlsplit(moto_s3_target.settings["blob__store__s3__endpoint__url"]).port
    assert port is not None
    with BlackHoleProxy(port) as proxy:
        settings = {**moto_s3_target.settings, "blob__store__s3__endpoint__url": f"http://{proxy.address}"}
        try:
            yield BlobTarget("s3", settings), proxy
        finally:
            proxy.heal()


def upload_config_harness(tmp_path: Path, target: BlobTarget) -> StateHarness:
    config = state_config(
        tmp_path,
        "blobstore",
        **target.config(f"millstream-{uuid.uuid4().hex[:12]}"),
        blob__store__s3__request__timeout__ms=REQUEST_TIMEOUT_MS,
        blob__store__retry__policy__max__retry__duration__millis=2000,
        task__commit__testing__pause__at=PAUSE_POINT,
        task__commit__testing__pause__ms=1000,
        task__commit__testing__marker__dir=str(tmp_path / "markers"),
    )
    return StateHarness(config)


def in_background(action: Callable[[], object]) -> tuple[threading.Thread, dict[str, BaseException | object]]:
    outcome: dict[str, BaseException | object] = {}

    def run() -> None:
        try:
            outcome["result"] = action()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, name="upload", daemon=True)
    thread.start()
    return thread, outcome


def test_an_upload_cut_off_mid_snapshot_fails_and_no_checkpoint_names_the_incomplete_snapshot(
    tmp_path: Path, proxied_s3: tuple[BlobTarget, BlackHoleProxy]
) -> None:
    target, proxy = proxied_s3
    harness = upload_config_harness(tmp_path, target)
    marker = tmp_path / "markers" / PAUSE_POINT
    marker.parent.mkdir()
    marker.write_text("held by the test until checkpoint A")  # commit 1 does not pause
    opened = harness.open()
    checkpoints = checkpoint_writer(harness.config, harness.metadata)
    try:
        for key, value in keys(0, 300).items():
            opened.store.put(key, value)
        checkpoint_a = harness.commit(opened)
        assert checkpoint_a is not None
        checkpoints.write_checkpoint(TASK, harness.v1)
        checkpoints.write_checkpoint(TASK, checkpoint_a)
        for key, value in keys(300, 400).items():
            opened.store.put(key, value)
        opened.storage.write_back()
        opened.producers.flush(TASK)
        failed_id = CheckpointId.create()
        markers = opened.storage.snapshot(failed_id)
        marker.unlink()  # this commit's upload pauses after its first file
        upload, outcome = in_background(lambda: opened.storage.upload(failed_id, markers))
        wait_until(marker.exists, 60, f"the upload to pause at {PAUSE_POINT}")
        with proxy.cut():  # until the upload has given up
            wait_until(lambda: not upload.is_alive(), 120, "the cut-off upload to end")

        error = outcome.get("error")
        assert isinstance(error, StateBackupError), outcome
        assert f"'{TASK}'" in str(error) and "counts" in str(error), error
        last = checkpoint_manager(harness.config, harness.metadata).read_last_checkpoint(TASK)
        assert last == checkpoint_a, "no checkpoint may follow the failed upload"
        assert isinstance(last, CheckpointV2)
        assert not any(str(failed_id) in marker for marker in _markers(last)), last
        assert restored_on_a_new_host(harness, tmp_path / "host-after-failure") == keys(0, 300)

        checkpoint_c = harness.commit(opened)  # healed: the next commit uploads the whole snapshot
        assert checkpoint_c is not None
        checkpoints.write_checkpoint(TASK, harness.v1)
        checkpoints.write_checkpoint(TASK, checkpoint_c)
        assert restored_on_a_new_host(harness, tmp_path / "host-after-commit-3") == keys(0, 400)
    finally:
        proxy.heal()
        checkpoints.stop()
        opened.close()


def _markers(checkpoint: CheckpointV2) -> list[str]:
    return [marker for by_store in checkpoint.state_checkpoint_markers.values() for marker in by_store.values()]
