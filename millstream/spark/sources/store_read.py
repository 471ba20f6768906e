"""A store's contents per task, read from where the job backs it up, for DataFrame reads of state.

Two sources, each what a restore would rebuild the store from:

* ``blob``: the snapshot the task's last (V2) checkpoint names, under the blob store backend's state checkpoint
  marker. Its files are downloaded into a temporary directory (every file's size and CRC32 verified, as a
  restore verifies them), opened with the store's own engine, and iterated.
* ``changelog``: the task's changelog partition from its oldest record to its newest at planning; the last
  write of a key wins and a tombstone deletes it, as a changelog restore replays it. This is the store as the
  changelog has it now, which may be ahead of the last checkpoint.

Planning (on the driver) reads the job's metadata store; reading (in a Spark task) touches only the blob store
or the changelog's system, so the tasks of one read run in parallel.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from millstream.checkpoint.checkpoint import CheckpointV2
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, parse_stream, store_names
from millstream.contracts.coordination import latest_job_model
from millstream.contracts.metadata import MetadataStore
from millstream.model import TaskName
from millstream.spark.sources.stream_read import OffsetRange, StreamReadError, plan_ranges, read_range
from millstream.storage.backends.blobstore.factory import BlobStoreStateBackendFactory
from millstream.storage.backends.blobstore.index import SnapshotIndex
from millstream.storage.backends.registry import backup_factories
from millstream.storage.changelog_partitions import changelog_partitions
from millstream.storage.factory import storage_engine_factory

BLOB = "blob"
CHANGELOG = "changelog"
SOURCES = (BLOB, CHANGELOG)

Entry = tuple[bytes, bytes]


@dataclass(frozen=True)
class TaskStoreSource:
    """Where one task's copy of a store is read from: a snapshot index blob, or a changelog range.

    Both None: the task has nothing backed up for the store (it never committed it), so it is empty."""

    task: str
    index_blob: str | None = None
    changelog: OffsetRange | None = None


def default_source(config: Settings, store: str) -> str:
    """``blob`` when the store backs up to the blob store, else ``changelog`` when it has one."""
    if store not in store_names(config):
        raise StreamReadError(
            f"the job has no store '{store}' (stores: {', '.join(sorted(store_names(config))) or 'none'})"
        )
    own = config.view(StoreConfig, store)
    blob_key = BlobStoreStateBackendFactory.marker_key()
    if any(factory.marker_key() == blob_key for factory in backup_factories(config, store)):
        return BLOB
    if own.changelog:
        return CHANGELOG
    raise StreamReadError(
        f"store '{store}' is backed up nowhere (no blob store backend, no stores.{store}.changelog): "
        "its contents exist only on the hosts that ran its tasks"
    )


def _check_known(config: Settings, store: str) -> None:
    known = store_names(config)
    if store not in known:
        raise StreamReadError(f"the job has no store '{store}' (stores: {', '.join(sorted(known)) or 'none'})")


def check_store(config: Settings, store: str, source: str) -> None:
    """Refuse an unknown store, or a source the store is not backed up to, before anything is read."""
    _check_known(config, store)
    if source not in SOURCES:
        raise StreamReadError(f"option 'source' must be one of {', '.join(SOURCES)}, not {source!r}")
    if source == CHANGELOG and not config.view(StoreConfig, store).changelog:
        raise StreamReadError(f"store '{store}' has no changelog (stores.{store}.changelog is not set)")


def plan_store_read(config: Settings, store: str, source: str) -> list[TaskStoreSource]:
    """One source per task of the job's last published job model, in task order."""
    check_store(config, store, source)
    with metadata_store(config) as metadata:
        model = latest_job_model(metadata)
        if model is None:
            raise StreamReadError(f"store '{store}': the job has never run, so it has no tasks and no state yet")
        tasks = sorted(model.tasks, key=TaskName.sort_key)
        if source == BLOB:
            return _plan_blob(config, metadata, store, tasks)
        partitions = changelog_partitions(metadata)
    changelog = parse_stream(config.view(StoreConfig, store).changelog or "", f"stores.{store}.changelog")
    ranges = {offsets.ssp.partition: offsets for offsets in plan_ranges(config, changelog, None, None)}
    planned = []
    for task in tasks:
        partition = partitions.get(task)
        if partition is None or partition not in ranges:
            raise StreamReadError(
                f"store '{store}' task '{task}': no partition of changelog '{changelog}' is assigned to it "
                f"(assigned: {dict(sorted(partitions.items()))}, the changelog has {sorted(ranges)})"
            )
        planned.append(TaskStoreSource(str(task), changelog=ranges[partition]))
    return planned


def _plan_blob(config: Settings, metadata: MetadataStore, store: str, tasks: list[TaskName]) -> list[TaskStoreSource]:
    manager = checkpoint_manager(config, metadata, None)
    manager.start()
    try:
        checkpoints = manager.read_all()
    finally:
        manager.stop()
    marker_key = BlobStoreStateBackendFactory.marker_key()
    planned = []
    for task in tasks:
        checkpoint = checkpoints.get(task)
        if checkpoint is not None and not isinstance(checkpoint, CheckpointV2):
            raise StreamReadError(
                f"store '{store}' task '{task}': its last checkpoint is version {checkpoint.version}, which names "
                "no snapshot: read V2 checkpoints first (task.checkpoint.read.versions=2,1) or read the changelog"
            )
        markers = checkpoint.state_checkpoint_markers.get(marker_key, {}) if checkpoint is not None else {}
        planned.append(TaskStoreSource(str(task), index_blob=markers.get(store)))
    return planned


def read_task_store(config: Settings, store: str, source: TaskStoreSource, idle_timeout: float) -> Iterator[Entry]:
    """The task's entries as stored (bytes), in key order for a snapshot, in changelog order otherwise."""
    if source.index_blob is not None:
        yield from _snapshot_entries(config, store, source.task, source.index_blob)
    elif source.changelog is not None:
        yield from _changelog_entries(config, source.changelog, idle_timeout)


def _snapshot_entries(config: Settings, store: str, task: str, index_blob: str) -> Iterator[Entry]:
    where = f"task '{task}' store '{store}'"
    backend = BlobStoreStateBackendFactory()
    try:
        transfer = backend.transfer(config)
        index = SnapshotIndex.from_bytes(transfer.get_bytes(index_blob, where), f"{where} index '{index_blob}'")
        with tempfile.TemporaryDirectory(prefix="millstream-store-read-") as scratch:
            store_dir = Path(scratch) / "store"
            transfer.download_dir(index.dir_index, store_dir, where)
            engine = storage_engine_factory(config, store).get_storage_engine(
                store, store_dir, config.view(StoreConfig, store)
            )
            try:
                yield from engine.all()
            finally:
                engine.close()
    finally:
        backend.close()


def _changelog_entries(config: Settings, offsets: OffsetRange, idle_timeout: float) -> Iterator[Entry]:
    latest: dict[bytes, bytes] = {}
    for batch in read_range(config, offsets, idle_timeout):
        for envelope in batch:
            if envelope.key is None:
                continue
            if envelope.message is None:
                latest.pop(envelope.key, None)
            else:
                latest[envelope.key] = envelope.message
    yield from latest.items()
