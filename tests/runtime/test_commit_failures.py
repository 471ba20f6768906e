"""``task.commit.skip.commit.during.failures.enabled``: a container tolerates failed uploads and commit
timeouts up to ``task.commit.skip.commit.exception.max.limit`` / ``.timeout.max.limit`` (Samza's defaults
5 and 2), skipping those commits while processing goes on, and fails at the next one, naming the limit.
Without it, the first failure fails the container (``tests/storage/test_stateful_jobs.py``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from millstream.config.settings import Settings
from millstream.contracts.blobstore import BlobStore, BlobStoreFactory
from millstream.contracts.systems import SystemProducer
from millstream.embedded.local_blobstore import LocalBlobStore
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.errors import LogSystemError
from millstream.embedded.log.producer import LogSystemProducer
from millstream.testing import InProcessRunner
from tests.helpers import seal
from tests.storage.test_stateful_jobs import config_for, final_stores, prepare, reference

SKIP = {"task.commit.skip.commit.during.failures.enabled": "true"}


class FlakyBlobStore(LocalBlobStore):
    """Fails the first ``test.blob.failures`` uploads of a job (each fails the commit it belongs to)."""

    failures_left: ClassVar[dict[str, int]] = {}

    def __init__(self, root: Path, job: str) -> None:
        super().__init__(root)
        self.job = job

    def put(self, name: str, source: Any, size: int) -> str:
        with threading.Lock():
            left = self.failures_left.get(self.job, 0)
            if left > 0:
                self.failures_left[self.job] = left - 1
                raise OSError("blob store unreachable")
        return super().put(name, source, size)


class FlakyBlobStoreFactory(BlobStoreFactory):
    def get_blob_store(self, config: Settings) -> BlobStore:
        job = config["job.data.dir"]
        FlakyBlobStore.failures_left.setdefault(job, int(config["test.blob.failures"]))
        return FlakyBlobStore(Path(job) / "blobs", job)


class StalledBlobStore(LocalBlobStore):
    """Every upload takes 2 s: twenty times ``task.commit.timeout.ms`` in the test, so the first upload
    is still running when the third commit behind it gives up waiting (after about 0.5 s)."""

    def put(self, name: str, source: Any, size: int) -> str:
        time.sleep(2.0)  # the slowness under test, not a wait for another thread
        return super().put(name, source, size)


class StalledBlobStoreFactory(BlobStoreFactory):
    def get_blob_store(self, config: Settings) -> BlobStore:
        return StalledBlobStore(Path(config["job.data.dir"]) / "blobs")


def flaky_job(tmp_path: Path, failures: int, **extra: str) -> tuple[Settings, set[tuple[int, int]]]:
    config = config_for(
        tmp_path, "blobstore", blob__store__manager__factory=f"{__name__}:FlakyBlobStoreFactory", **extra
    ).with_overrides({"test.blob.failures": str(failures)})
    written = prepare(config)
    seal(config, "in")
    return config, written


def test_tolerated_upload_failures_are_skipped_and_the_state_stays_exact(tmp_path: Path) -> None:
    config, written = flaky_job(tmp_path, failures=3)
    result = InProcessRunner(config.with_overrides(SKIP)).run(timeout=60)
    assert result.outcome == "finished", result.error
    assert final_stores(config) == reference(written)


def test_the_failure_past_the_limit_fails_the_container_naming_the_limit(tmp_path: Path) -> None:
    config, _ = flaky_job(tmp_path, failures=50)
    overrides = {**SKIP, "task.commit.skip.commit.exception.max.limit": "1"}
    result = InProcessRunner(config.with_overrides(overrides)).run(timeout=60)
    assert result.outcome == "failed"
    assert "blob store unreachable" in (result.error or "")
    assert "after 1 tolerated: task.commit.skip.commit.exception.max.limit" in (result.error or "")


def test_commit_timeouts_are_skipped_up_to_the_limit_then_fail_the_container(tmp_path: Path) -> None:
    config = config_for(
        tmp_path,
        "blobstore",
        blob__store__manager__factory=f"{__name__}:StalledBlobStoreFactory",
        task__commit__max__delay__ms=0,
        task__commit__timeout__ms=100,
    ).with_overrides(SKIP)
    prepare(config)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "failed"
    assert "did not finish uploading within task.commit.timeout.ms=100" in (result.error or "")
    assert "after 2 tolerated: task.commit.skip.commit.timeout.max.limit" in (result.error or "")


class ChangelogPositionOutage:
    """The log admin cannot say where the changelog ends for its next ``failures`` calls, as an index that
    cannot be read or a broker that does not answer; each such call fails the snapshot of its commit."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, failures: int) -> None:
        self.left = failures
        self.lock = threading.Lock()
        original = LogSystemAdmin.get_written_ssp_metadata
        outage = self

        def written(admin: LogSystemAdmin, ssps: Any) -> Any:
            ssps = list(ssps)
            with outage.lock:
                failing = outage.left > 0 and any(ssp.stream == "counts-changelog" for ssp in ssps)
                outage.left -= failing
            if failing:
                raise LogSystemError("log stream 'counts-changelog': the partition index cannot be read")
            return original(admin, ssps)

        monkeypatch.setattr(LogSystemAdmin, "get_written_ssp_metadata", written)
        # as a producer without acknowledged positions (Kafka's): every snapshot asks the admin
        monkeypatch.setattr(LogSystemProducer, "written_offsets", SystemProducer.written_offsets)


def test_tolerated_snapshot_failures_are_retried_and_the_state_stays_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_for(tmp_path, "changelog")
    written = prepare(config)
    seal(config, "in")
    outage = ChangelogPositionOutage(monkeypatch, failures=3)
    result = InProcessRunner(config.with_overrides(SKIP)).run(timeout=60)
    assert result.outcome == "finished", result.error
    assert outage.left == 0
    assert final_stores(config) == reference(written)


def test_an_untolerated_snapshot_failure_fails_the_container_naming_store_and_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = config_for(tmp_path, "changelog")
    prepare(config)
    ChangelogPositionOutage(monkeypatch, failures=1)
    result = InProcessRunner(config).run(timeout=60)
    assert result.outcome == "failed"
    error = result.error or ""
    assert "cannot read the newest offset of changelog partition" in error
    assert "store(s) 'counts'" in error and "the partition index cannot be read" in error
