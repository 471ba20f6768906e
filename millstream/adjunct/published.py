"""Published versions of adjunct stores: the record running containers poll, and its files in the blob store.

A bulk build (``millstream adstore build``) uploads one RocksDB table file per stream partition
(``partitioned``) or a few key-ordered range files every container ingests (``broadcast``), then
publishes a ``PublishedVersion`` in the metadata store namespace ``adstore-versions``:

- key ``<store>``: the latest version, the one containers switch to;
- key ``<store>/<version>``: every version still kept, for listing and for retention.

Blob names: ``[<blob.store.prefix>/]adstore/<job name>-<job id>/<store>/<version>/<file>`` so every
file a store's builds ever uploaded lies under one prefix, which is what lets retention find the files
of failed builds too.

Guarantees:

- The latest version only moves forward in time: publishing a version older than the latest (a build
  that started before the one already published) is refused, atomically (``compare_and_put``).
- The history record is written before the latest pointer, so the latest is always listed.
- Retention keeps the latest two versions' files: containers still downloading the previous version
  when a new one is published can finish it.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from millstream.config.settings import Settings
from millstream.contracts.blobstore import BlobNotFoundError, BlobStore, BlobStoreError, RetryPolicy, blob_store
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.contracts.metadata import MetadataStore
from millstream.errors import MillstreamError

log = logging.getLogger(__name__)

ADSTORE_VERSIONS_NAMESPACE = "adstore-versions"
BROADCAST_FILES = "*"
"""The ``files`` key of a broadcast version: every container ingests all of its files."""
KEPT_VERSIONS = 2

Layout = Literal["partitioned", "broadcast"]


class AdjunctVersionError(MillstreamError):
    """A published version cannot be published, read or downloaded; names the store, version and blob."""


@dataclass(frozen=True)
class PublishedVersion:
    """One sealed, bulk-built version of an adjunct store, as containers find it in the metadata store."""

    store: str
    version: str
    """Unique, and sorts by creation time: ``20261121T101500123Z-<8 hex>``."""
    created_ms: int
    layout: Layout
    files: dict[str, list[str]]
    """``partitioned``: ``str(partition)`` → blob ids (partitions without records are absent);
    ``broadcast``: ``"*"`` → blob ids in key order."""
    records: int
    source: str
    """The dataset the version was built from."""
    partition_count: int = 0
    """Partitions of the input stream the build partitioned for (0 for broadcast): a container of a
    job whose stream has another count must not install it."""
    skipped: int = 0
    """Dataset rows left out because their value was null."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Fields written by a newer millstream, kept so a round trip loses nothing."""

    def to_bytes(self) -> bytes:
        values = asdict(self)
        extra = values.pop("extra")
        return orjson.dumps({**extra, **values}, option=orjson.OPT_SORT_KEYS)

    @classmethod
    def from_bytes(cls, data: bytes, where: str = "") -> PublishedVersion:
        try:
            values = orjson.loads(data)
            known = {name: values.pop(name) for name in list(values) if name in _FIELDS}
            record = cls(**known, extra=values)
            if record.layout not in ("partitioned", "broadcast") or not isinstance(record.files, dict):
                raise ValueError(f"layout {record.layout!r} or files {record.files!r} not understood")
            return record
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as error:
            context = f" ({where})" if where else ""
            raise AdjunctVersionError(f"published version record{context} is corrupt: {error}") from None

    def blobs_for(self, partitions: Iterable[int] | None) -> list[str]:
        """The blob ids a reader of ``partitions`` ingests (None, or a broadcast version: all), in order:
        by partition, then by key."""
        if self.layout == "broadcast" or partitions is None:
            return [blob for name in sorted(self.files, key=_file_order) for blob in self.files[name]]
        return [blob for partition in sorted(set(partitions)) for blob in self.files.get(str(partition), [])]


_FIELDS = frozenset(name for name in PublishedVersion.__dataclass_fields__ if name != "extra")


def _file_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (-1, name)


def new_version_id(now_ms: int | None = None) -> str:
    """``<UTC time to the millisecond>Z-<8 random hex>``: unique, and string order is time order."""
    millis = int(time.time() * 1000) if now_ms is None else now_ms
    seconds, fraction = divmod(millis, 1000)
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(seconds))}{fraction:03d}Z-{secrets.token_hex(4)}"


def store_blob_prefix(config: Settings, store: str) -> str:
    """``[<blob.store.prefix>/]adstore/<job name>-<job id>/<store>/``: every file of every version."""
    base = config.view(BlobStoreConfig).prefix.strip("/")
    return "/".join(part for part in (base, "adstore", config.job.job_key, store) if part) + "/"


def version_blob_name(config: Settings, store: str, version: str, file_name: str) -> str:
    return f"{store_blob_prefix(config, store)}{version}/{file_name}"


def _history_key(store: str, version: str) -> str:
    return f"{store}/{version}"


def publish_version(metadata_store: MetadataStore, record: PublishedVersion) -> None:
    """Make ``record`` the latest version of its store; containers switch to it at their next poll.

    Idempotent for the record already latest. Raises ``AdjunctVersionError`` when a newer version is
    already published (this one would move readers back in time).
    """
    namespace = ADSTORE_VERSIONS_NAMESPACE
    data = record.to_bytes()
    metadata_store.put(namespace, _history_key(record.store, record.version), data)
    while True:
        current = metadata_store.get(namespace, record.store)
        if current is not None:
            latest = PublishedVersion.from_bytes(current, f"store '{record.store}'")
            if latest.version == record.version:
                return
            if latest.version > record.version:
                metadata_store.delete(namespace, _history_key(record.store, record.version))
                raise AdjunctVersionError(
                    f"adjunct store '{record.store}': version '{record.version}' cannot be published, a newer "
                    f"version '{latest.version}' was published while it was built"
                )
        if metadata_store.compare_and_put(namespace, record.store, data, {(namespace, record.store): current}):
            metadata_store.flush()
            return


def latest_version(metadata_store: MetadataStore, store: str) -> PublishedVersion | None:
    """The version containers of ``store`` should serve, or None before the first publication."""
    data = metadata_store.get(ADSTORE_VERSIONS_NAMESPACE, store)
    return None if data is None else PublishedVersion.from_bytes(data, f"store '{store}'")


def list_versions(metadata_store: MetadataStore, store: str) -> list[PublishedVersion]:
    """Every kept version of ``store``, oldest first."""
    prefix = f"{store}/"
    records = [
        PublishedVersion.from_bytes(data, f"store '{store}', key '{key}'")
        for key, data in metadata_store.all(ADSTORE_VERSIONS_NAMESPACE).items()
        if key.startswith(prefix)
    ]
    return sorted(records, key=lambda record: record.version)


def retire_versions(
    config: Settings, metadata_store: MetadataStore, store: str, keep: int = KEPT_VERSIONS
) -> list[str]:
    """Delete the files and records of every version of ``store`` older than the ``keep`` newest; returns
    the versions whose files were deleted (failed builds' leftovers included).

    Files go before records, so a cleanup interrupted half-way is finished by the next one. Nothing
    older than the latest can ever be published (``publish_version`` refuses it), so deleting the files
    of a build still running with an older version loses nothing that could be served.
    """
    kept = list_versions(metadata_store, store)[-keep:] if keep > 0 else []
    if len(kept) < keep:
        return []
    oldest_kept = kept[0].version
    blobs = blob_store(config)
    retry = RetryPolicy.of(config)
    try:
        prefix = store_blob_prefix(config, store)
        doomed: dict[str, list[str]] = {}
        for blob_id in retry.run(lambda: blobs.list(prefix), f"list '{prefix}'"):
            version = blob_id[len(prefix) :].split("/", 1)[0]
            if version < oldest_kept:
                doomed.setdefault(version, []).append(blob_id)
        for blob_id in sorted(b for ids in doomed.values() for b in ids):
            retry.run(lambda b=blob_id: blobs.delete(b), f"delete '{blob_id}'")  # type: ignore[misc]
        old_records = [
            record.version for record in list_versions(metadata_store, store) if record.version < oldest_kept
        ]
        metadata_store.delete_all(ADSTORE_VERSIONS_NAMESPACE, [_history_key(store, v) for v in old_records])
        metadata_store.flush()
    finally:
        blobs.close()
    return sorted(set(doomed) | set(old_records))


def download_version(
    config: Settings, record: PublishedVersion, partitions: Iterable[int] | None, target_dir: Path
) -> list[Path]:
    """Download the files a reader of ``partitions`` ingests into ``target_dir``; returns their paths in
    ingestion order (``blobs_for``). ``blob.store.transfer.threads`` files at once, each retried per
    ``blob.store.retry.policy.*``; a file is either whole or absent."""
    blobs = record.blobs_for(partitions)
    target_dir = Path(target_dir)
    target_dir.mkdir(parents=True, exist_ok=True)
    paths = [target_dir / blob_id.rsplit("/", 1)[-1] for blob_id in blobs]
    if len(set(paths)) != len(paths):
        raise AdjunctVersionError(
            f"adjunct store '{record.store}' version '{record.version}': two of its files have the same name"
        )
    if not blobs:
        return []
    store = blob_store(config)
    retry = RetryPolicy.of(config)
    threads = min(config.view(BlobStoreConfig).transfer_threads, len(blobs))
    try:
        with ThreadPoolExecutor(threads, thread_name_prefix=f"adstore-{record.store}") as pool:
            futures = [
                pool.submit(_download, store, retry, record, blob_id, path)
                for blob_id, path in zip(blobs, paths, strict=True)
            ]
            failures = [future.exception() for future in futures]
    finally:
        store.close()
    for failure in failures:
        if failure is not None:
            raise failure
    return paths


def _download(store: BlobStore, retry: RetryPolicy, record: PublishedVersion, blob_id: str, path: Path) -> None:
    where = f"adjunct store '{record.store}' version '{record.version}'"
    partial = path.with_name(f"{path.name}.partial")

    def attempt() -> None:
        with open(partial, "wb") as sink:
            store.get(blob_id, sink)
        partial.replace(path)

    try:
        retry.run(attempt, f"{where}: download of blob '{blob_id}'")
    except BlobNotFoundError:
        partial.unlink(missing_ok=True)
        raise AdjunctVersionError(
            f"{where}: blob '{blob_id}' is missing from {store.describe()} (deleted by retention after two newer "
            "versions were published, or removed by hand)"
        ) from None
    except (BlobStoreError, OSError) as error:
        partial.unlink(missing_ok=True)
        raise AdjunctVersionError(f"{where}: cannot download blob '{blob_id}': {error}") from None
