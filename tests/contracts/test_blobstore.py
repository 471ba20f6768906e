"""The local blob store's contract, and the retry policy every blob store call goes through."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.contracts.blobstore import (
    BlobNotFoundError,
    BlobStoreError,
    BlobStoreRetriableError,
    RetryPolicy,
    blob_store,
)
from millstream.embedded.local_blobstore import LocalBlobStore
from millstream.errors import ConfigError


def test_put_get_list_delete(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    assert store.put("job/t/s/1-1/a", io.BytesIO(b"hello"), 5) == "job/t/s/1-1/a"
    store.put("job/t/s/1-1/b", io.BytesIO(b""), 0)
    store.put("job/t/other/x", io.BytesIO(b"x"), 1)
    sink = io.BytesIO()
    store.get("job/t/s/1-1/a", sink)
    assert sink.getvalue() == b"hello"
    assert store.list("job/t/s/") == ["job/t/s/1-1/a", "job/t/s/1-1/b"]
    assert store.list("job/t/s/1-1/a") == ["job/t/s/1-1/a"]
    store.delete("job/t/s/1-1/a")
    store.delete("job/t/s/1-1/a")  # deleting twice is fine: cleanups are retried
    with pytest.raises(BlobNotFoundError, match="job/t/s/1-1/a"):
        store.get("job/t/s/1-1/a", io.BytesIO())


@pytest.mark.parametrize("blob_id", ["", "../x", "a//b", "a/./b"])
def test_blob_ids_cannot_escape_the_directory(tmp_path: Path, blob_id: str) -> None:
    with pytest.raises(BlobStoreError, match="not a valid blob id"):
        LocalBlobStore(tmp_path).get(blob_id, io.BytesIO())


def test_a_failed_put_leaves_no_blob(tmp_path: Path) -> None:
    class Broken(io.RawIOBase):
        def readable(self) -> bool:
            return True

        def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
            raise OSError("stream broke")

    store = LocalBlobStore(tmp_path)
    with pytest.raises(BlobStoreError, match="stream broke"):
        store.put("a/b", Broken(), 10)  # type: ignore[arg-type]
    assert store.list("") == []


def test_the_default_blob_store_is_a_directory_under_the_data_dir(tmp_path: Path) -> None:
    store = blob_store(Settings({"job.data.dir": str(tmp_path)}))
    assert isinstance(store, LocalBlobStore) and store.root == tmp_path / "blobs"


def test_an_unknown_blob_store_factory_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"blob\.store\.manager\.factory.*azure, local, s3"):
        blob_store(Settings({"blob.store.manager.factory": "nope"}))


def test_retry_policy_retries_retriable_failures_until_success() -> None:
    attempts = []
    sleeps: list[float] = []

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise BlobStoreRetriableError("throttled")
        return "ok"

    policy = RetryPolicy(max_retries=5, delay_ms=10, factor=2.0, jitter=0.0)
    assert policy.run(flaky, "put x", sleep=sleeps.append) == "ok"
    assert sleeps == [0.01, 0.02]


def test_retry_policy_gives_up_after_max_retries_naming_the_operation() -> None:
    def failing() -> None:
        raise BlobStoreRetriableError("throttled")

    with pytest.raises(BlobStoreError, match=r"put x: giving up after 3 attempt\(s\): throttled"):
        RetryPolicy(max_retries=2, delay_ms=1).run(failing, "put x", sleep=lambda s: None)


def test_retry_policy_does_not_retry_other_failures() -> None:
    calls = []

    def failing() -> None:
        calls.append(1)
        raise BlobNotFoundError("gone")

    with pytest.raises(BlobNotFoundError):
        RetryPolicy().run(failing, "get", sleep=lambda s: None)
    assert calls == [1]


def test_the_default_retry_policy_resumes_within_a_few_seconds_of_a_long_outage_ending() -> None:
    """Samza's 312.5 s longest delay made a 60 s outage cost minutes more: the next try after the store came
    back could be that far away. The default caps each delay at 5 s (plus its jitter)."""
    sleeps: list[float] = []

    def down_for_twelve_tries() -> str:
        if len(sleeps) < 12:
            raise BlobStoreRetriableError("connection refused")
        return "ok"

    policy = RetryPolicy.of(Settings({}))
    assert policy.run(down_for_twelve_tries, "put x", sleep=sleeps.append) == "ok"
    assert sum(sleeps) > 30, "the delays still grow through a long outage"
    assert max(sleeps) <= 5.0 * 1.1
