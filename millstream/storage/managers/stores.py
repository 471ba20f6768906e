"""The stores of a container's tasks, from restore at start to the last commit.

``ContainerStorageManager`` owns what the tasks share: one instance of each state backend factory
(its clients and transfer threads), the systems changelogs use, and the restore and commit thread
pools. ``TaskStorageManager`` owns one task's engines, stores and backup managers and carries out the
storage steps of a commit for ``TaskInstance``: ``snapshot`` (flush the stores, make the checkpoint
directories, let backends snapshot), ``upload``, ``write_local_checkpoint`` and ``cleanup`` (on a commit thread).
When every store of the task has an object cache (``can_hold``), the snapshot runs on the commit thread too:
``hold`` is the commit's cut on the task's thread (the caches' dirty entries are taken and their later writes held
in the caches), ``write_held`` writes the cut's entries to the engines and changelogs, the producers are flushed,
``snapshot`` captures exactly the state of the cut (nothing the task wrote since reached an engine or a
changelog), and ``release`` lets the caches write back again. Otherwise the snapshot runs on the task's thread,
exclusive with processing.

The container first claims every task's changelog partitions (fencing older attempts' writes before any restore
reads a changelog's end), then restores the tasks in parallel. Restore order per task, as in Samza, after the claim
of its store directories: persistent stores without a backup lose their directory (they
are always empty at start); every other store is restored by the backend the checkpoint selects
(``registry.restore_factory_for``); the remaining engines open on their directories; what backends
keep for stores the config no longer backs up with them is found (and deleted after the first new
checkpoint, see ``dropped``); backup managers start from the same checkpoint; then the last
checkpoint's cleanup runs again (a crash may have cut it short).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, parse_stream, task_store_names
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metrics import NOOP_METRICS, MetricsRegistry
from millstream.contracts.systems import SystemStreamPartitionMetadata
from millstream.job_model import JobModel, TaskModel
from millstream.model import SystemStreamPartition, TaskName
from millstream.serde.registry import SerdeRegistry
from millstream.storage.backends.base import (
    StateBackendFactory,
    StoreSpec,
    SystemAccess,
    TaskBackendContext,
    TaskBackupManager,
)
from millstream.storage.backends.changelog.marker import parse_v1_entry
from millstream.storage.backends.registry import backup_factories, restore_factories, restore_factory_for
from millstream.storage.cached import CachedStore
from millstream.storage.changelog_partitions import changelog_partition
from millstream.storage.errors import StateBackupError, StateRestoreError
from millstream.storage.factory import StorageEngineFactory, storage_engine_factory
from millstream.storage.kv import ChangelogWriter, KeyValueStorageEngine, TaskKeyValueStore
from millstream.storage.layout import (
    LIVE,
    ListedOnce,
    StoreDirListing,
    StoreLayout,
    attempt_dir,
    checkpoint_dir,
    delete_checkpoint_dirs,
    delete_checkpoint_dirs_among,
    delete_path,
    write_checkpoint_file,
    write_offset_file,
)
from millstream.storage.managers.dropped import DroppedStoreSweep
from millstream.storage.managers.faults import CommitPauses
from millstream.storage.ownership import claim, owned

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Store:
    spec: StoreSpec
    engine_factory: StorageEngineFactory
    backups: tuple[type[StateBackendFactory], ...]
    logged: bool
    """Has a backup or restore backend: its current directory is never trusted at start."""

    @property
    def makes_local_checkpoints(self) -> bool:
        """Whether its commits make local checkpoint directories: a persistent store with a backup."""
        return self.spec.persistent and bool(self.backups)

    @property
    def checkpoints_on_interval(self) -> bool:
        """Whether its local checkpoints may be spaced out (``stores.<s>.local.checkpoint.interval.ms``): no
        backup of it reads the directory, the changelog's records are the backup."""
        return self.makes_local_checkpoints and not any(backup.reads_local_checkpoint for backup in self.backups)


class TaskStorageManager:
    def __enter__(self) -> Self:
        """Leaving closes the task's stores and backups."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __init__(self, container: ContainerStorageManager, task_name: TaskName, task_model: TaskModel) -> None:
        self.container = container
        self.task_name = task_name
        self.task_model = task_model
        config = container.config
        self._stores: dict[str, _Store] = {}
        partition: int | None = None
        for name in container.store_names:
            own = config.view(StoreConfig, name)
            engine_factory = storage_engine_factory(config, name)
            backups = tuple(backup_factories(config, name))
            logged = bool(backups or restore_factories(config, name))
            changelog: SystemStreamPartition | None = None
            if own.changelog:
                if partition is None:
                    partition = changelog_partition(container.metadata_store, task_name)
                changelog = parse_stream(own.changelog, f"stores.{name}.changelog").partition(partition)
            store_dir = container.layout.store_dir(name, task_name, logged)
            if container.writer is not None:
                store_dir = attempt_dir(store_dir, container.writer.generation, container.writer.epoch)
            spec = StoreSpec(name, own, store_dir, engine_factory.persistent, changelog)
            self._stores[name] = _Store(spec, engine_factory, backups, logged)
        self.engines: dict[str, KeyValueStorageEngine] = {}
        self.stores: dict[str, TaskKeyValueStore | CachedStore] = {}
        """What the task reads and writes: each store behind its object cache, when it has one."""
        self.backup_managers: dict[str, TaskBackupManager] = {}
        self.revert_unsealed = False
        """The restore reverted writes no checkpoint covers, or could not restore the checkpoint's state
        whole, or found its backup incomplete, and no snapshot since sealed that (Samza commits right
        after such a restore; so does the container)."""
        self._engine_lock = threading.Lock()
        self._dropped = DroppedStoreSweep(task_name, None, [])
        """What backends keep for stores this config no longer backs up with them: deleted after the
        first new checkpoint."""
        self.restored_by: dict[str, str] = {}
        """Store → the backend that restored it (for logs and tests)."""
        self._held: dict[str, list[tuple[bytes, bytes | None]]] | None = None
        """The cut of the commit whose snapshot is being made beside processing (``hold``), per store."""
        self._local_checkpoints: dict[str, set[CheckpointId]] = {}
        """Per store, the checkpoint directories this attempt may have left since its last cleanup (the one it
        kept and the snapshots made since). Only the owning task's thread and its one commit in flight touch it,
        one after the other."""
        self._described: tuple[CheckpointId, list[Checkpoint]] | None = None
        """The last snapshot's checkpoints, as ``write_local_checkpoint`` got them (``seal`` describes with them)."""
        self._durable: CheckpointId | None = None
        """The last checkpoint known durable: the last ``cleanup``'s."""
        self._snapshotted: CheckpointId | None = None
        """The checkpoint whose state the engines hold: the last snapshot's, None from a cut or a snapshot's start
        until that snapshot succeeded (its writes may be in the engines while it names none)."""
        self._kept: dict[str, CheckpointId] = {}
        """Per store, the newest local checkpoint directory of this attempt whose commit was durable: the one its
        cleanups keep, and the time the next one is due from (``_local_checkpoint_due``)."""
        self._cleaned: set[str] = set()
        """Stores whose first cleanup ran: that one also deletes what earlier attempts and restores left, as the
        container's listing after every claim names it (``claimed_listing``); later ones only what this
        attempt made."""

    def __repr__(self) -> str:
        return f"TaskStorageManager({self.task_name!r}, stores={sorted(self._stores)})"

    @property
    def has_backups(self) -> bool:
        return bool(self.backup_managers)

    @property
    def restorable_from_v1(self) -> bool:
        """Whether a V1 checkpoint can restore every backed-up store (it carries changelog offsets only)."""
        v1 = CheckpointV1({})
        return all(
            restore_factory_for(self.container.config, name, v1, entry.spec.changelog is not None) is not None
            for name, entry in self._stores.items()
            if entry.backups
        )

    @property
    def dirty(self) -> bool:
        return self.revert_unsealed or any(store.dirty for store in self.stores.values())

    @property
    def can_hold(self) -> bool:
        """Whether a commit's snapshot can run beside processing: every store keeps the task's writes in an
        object cache, which can hold them while the snapshot is made (a store without one writes through)."""
        return bool(self.stores) and all(isinstance(store, CachedStore) for store in self.stores.values())

    def backend_context(self, names: list[str]) -> TaskBackendContext:
        container = self.container
        return TaskBackendContext(
            container.config,
            container.job_model,
            self.task_name,
            self.task_model,
            {name: self._stores[name].spec for name in names},
            container.metadata_store,
            container.systems,
            self.open_engine,
            container.pause,
            container.metrics,
            container.listing,
            container.changelog_metadata,
        )

    @property
    def changelogs(self) -> list[SystemStreamPartition]:
        """The task's changelog partitions, one per store that has a changelog."""
        return [entry.spec.changelog for entry in self._stores.values() if entry.spec.changelog is not None]

    def open_engine(self, store: str) -> KeyValueStorageEngine:
        """The store's engine, opened on its directory on first use."""
        with self._engine_lock:
            engine = self.engines.get(store)
            if engine is None:
                entry = self._stores[store]
                engine = entry.engine_factory.get_storage_engine(
                    store, entry.spec.store_dir, entry.spec.config, self.container.tasks_in_container
                )
                self.engines[store] = engine
            return engine

    def claim_changelogs(self) -> None:
        """Fence off older attempts' writes to the task's changelog partitions before anything reads their end,
        so nothing a zombie writes lands behind the offsets this attempt's checkpoints will name. The container
        claims every task's before any restore starts (``ContainerStorageManager.restore``)."""
        if self.container.writer is None:
            return
        with self._named_failure("claim the changelogs of"):
            for ssp in self.changelogs:
                self.container.systems.producer(ssp.system).claim(ssp)

    def claim_directories(self) -> None:
        """Take the task's store directories before anything in them is read or deleted, deleting the other
        attempts' working directories (a zombie still working in one fails at its next write there)."""
        writer = self.container.writer
        if writer is None:
            return
        for entry in self._stores.values():
            if entry.spec.persistent:
                claim(entry.spec.store_dir, writer, self.container.listing)

    def restore(self, checkpoint: Checkpoint | None) -> None:
        """Bring every store to the state ``checkpoint`` names (runs on a restore thread, once the container
        claimed the task's changelogs: ``claim_changelogs``); a filesystem that refuses (a full disk, a store
        directory replaced by a file) fails naming the task and its stores."""
        with self._named_failure("restore"):
            self._restore(checkpoint)

    @contextmanager
    def _named_failure(self, doing: str) -> Iterator[None]:
        """An ``OSError`` within becomes a ``StateRestoreError`` naming the task and its stores."""
        try:
            yield
        except OSError as error:
            names = sorted(self._stores)
            stores = f"store{'s' if len(names) > 1 else ''} {', '.join(repr(name) for name in names)}"
            raise StateRestoreError(f"task '{self.task_name}': cannot {doing} {stores}: {error}") from error

    def _restore(self, checkpoint: Checkpoint | None) -> None:
        started = time.monotonic()
        self.claim_directories()
        groups: dict[str, tuple[type[StateBackendFactory], list[str]]] = {}
        for name, entry in self._stores.items():
            if entry.spec.persistent and not entry.logged:
                delete_path(entry.spec.store_dir)
                delete_checkpoint_dirs(entry.spec.store_dir, listing=self.container.listing)
                continue
            if entry.spec.persistent and entry.spec.config.clean_on_container_start:
                delete_path(entry.spec.store_dir)
                delete_checkpoint_dirs(entry.spec.store_dir, listing=self.container.listing)
            factory_class = restore_factory_for(
                self.container.config, name, checkpoint, entry.spec.changelog is not None
            )
            if factory_class is None:
                if entry.spec.persistent:
                    delete_path(entry.spec.store_dir)
                    delete_checkpoint_dirs(entry.spec.store_dir, listing=self.container.listing)
                continue
            groups.setdefault(factory_class.marker_key(), (factory_class, []))[1].append(name)
        for key, (factory_class, names) in groups.items():
            manager = self.container.factory(factory_class).get_restore_manager(self.backend_context(names))
            try:
                manager.init(checkpoint)
                manager.restore()
                self.revert_unsealed = self.revert_unsealed or manager.reverted > 0 or manager.lost_state
            finally:
                manager.close()
            for name in names:
                self.restored_by[name] = key
        for name in self._stores:
            self.open_engine(name)
        backups = {name: entry.backups for name, entry in self._stores.items()}
        self._dropped = DroppedStoreSweep.find(
            self.container.config, self.task_name, checkpoint, backups, self.container.factory
        )
        log.info("task '%s': %d store(s) ready in %.2fs", self.task_name, len(self._stores), time.monotonic() - started)

    def start(self, checkpoint: Checkpoint | None) -> None:
        """Create the backup managers from ``checkpoint`` and the task's stores; finish the last
        checkpoint's cleanup, which a crash may have cut short."""
        config = self.container.config
        serdes = self.container.serdes
        by_backend: dict[str, tuple[type[StateBackendFactory], list[str]]] = {}
        for name, entry in self._stores.items():
            for factory_class in entry.backups:
                by_backend.setdefault(factory_class.marker_key(), (factory_class, []))[1].append(name)
        for key, (factory_class, names) in by_backend.items():
            manager = self.container.factory(factory_class).get_backup_manager(self.backend_context(names))
            manager.init(checkpoint)
            self.backup_managers[key] = manager
            self.revert_unsealed = self.revert_unsealed or manager.backup_incomplete
        for name in self._stores:
            own = config.view(StoreConfig, name)
            writers = [w for m in self.backup_managers.values() if (w := m.store_writer(name)) is not None]
            store = TaskKeyValueStore(
                self.task_name,
                name,
                self.engines[name],
                serdes.get(own.key_serde, f"stores.{name}.key.serde") if own.key_serde else None,
                serdes.get(own.msg_serde, f"stores.{name}.msg.serde") if own.msg_serde else None,
                _combined(writers),
            )
            cache_size, write_batch_size = own.object_cache(name)
            self.stores[name] = CachedStore(store, cache_size, write_batch_size) if cache_size else store
        if isinstance(checkpoint, CheckpointV2):
            self.cleanup(checkpoint.checkpoint_id, checkpoint.state_checkpoint_markers)

    def write_back(self) -> None:
        """Hand what the stores' object caches hold dirty to the engines and the changelogs: a commit calls it
        before it flushes the task's producers, so the changelog and the snapshot hold every write so far."""
        for name, store in self.stores.items():
            try:
                store.write_back()
            except Exception as error:
                raise StateBackupError(f"task '{self.task_name}': cannot write back store '{name}': {error}") from error

    def hold(self) -> None:
        """The cut of a commit whose snapshot runs beside processing (``can_hold``), on the task's thread: every
        store's dirty entries are taken for ``write_held``, and the task's later writes stay in the caches until
        ``release``. The stores count as clean from here: a write after the cut makes the next commit due."""
        held = {}
        for name, store in self.stores.items():
            assert isinstance(store, CachedStore), "hold() needs can_hold"
            held[name] = store.hold()
            store.dirty = False
        self._held = held
        self._snapshotted = None

    def write_held(self) -> None:
        """On the commit thread: the cut's entries to the engines and the changelogs (then the commit flushes
        the producers and snapshots)."""
        for name, entries in (self._held or {}).items():
            store = self.stores[name]
            assert isinstance(store, CachedStore)
            try:
                store.store.put_serialized(entries)
            except Exception as error:
                raise StateBackupError(
                    f"task '{self.task_name}': cannot write back store '{name}' for a snapshot: {error}"
                ) from error

    def release(self) -> None:
        """The snapshot of the held cut is made (or failed): the caches write back again."""
        self._held = None
        for store in self.stores.values():
            if isinstance(store, CachedStore):
                store.release()

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, dict[str, str]]:
        """The stores' state as of the commit's cut; backend → store → marker. Their object caches were written
        back (``write_back`` on the task's thread, or ``write_held`` after ``hold``) and the producers flushed
        before. Held, it runs on the commit thread and reads only the engines and backends, never the caches.

        The persistent stores with a backup get a local checkpoint directory, their memtables flushed first,
        except those whose changelog is their only backup while their last one is younger than
        ``stores.<s>.local.checkpoint.interval.ms`` (``_local_checkpoint_due``): their changelog's offset, which
        the markers name, is then the whole snapshot, and their memtables stay as they are."""
        self._snapshotted = None
        held = self._held is not None
        local = [name for name, entry in self._stores.items() if self._local_checkpoint_due(entry, checkpoint_id)]
        for name, store in self.stores.items():
            if not held and isinstance(store, CachedStore) and store.pending_writes:
                # written back now, they could miss the changelog offsets this snapshot names
                raise StateBackupError(
                    f"task '{self.task_name}': store '{name}' holds {store.pending_writes} writes not written back "
                    "before the producers' flush: the commit must call write_back first"
                )
            if name not in local and self._stores[name].checkpoints_on_interval:
                continue  # the changelog holds its writes; its next local checkpoint flushes its memtable
            try:
                store.store.flush() if held and isinstance(store, CachedStore) else store.flush()
            except Exception as error:
                raise StateBackupError(
                    f"task '{self.task_name}': cannot flush store '{name}' in '{self._stores[name].spec.store_dir}' "
                    f"for a snapshot: {error}"
                ) from error
        for name in local:
            store_dir = self._stores[name].spec.store_dir
            try:
                with owned(store_dir, self.container.writer):
                    self._make_local_checkpoint(name, checkpoint_id)
            except OSError as error:  # the owner lock beside the directory (the store flushed nothing to fail)
                raise StateBackupError(
                    f"task '{self.task_name}': cannot snapshot store '{name}' in '{store_dir}': {error}"
                ) from error
        markers = {key: manager.snapshot(checkpoint_id) for key, manager in self.backup_managers.items()}
        if not held:  # only now: a snapshot that failed leaves them for the next commit (held: cleared at the cut)
            for store in self.stores.values():
                store.dirty = False
        self.revert_unsealed = False
        self._snapshotted = checkpoint_id
        return markers

    def _local_checkpoint_due(self, entry: _Store, checkpoint_id: CheckpointId) -> bool:
        """Whether this commit makes ``entry``'s local checkpoint directory: it is a persistent store with a
        backup, and a backup reads the directory, or the interval is 0, or this attempt has no durable one yet
        (the first commit after a restore makes one, so its cleanup never leaves the store without), or the
        newest is at least ``stores.<s>.local.checkpoint.interval.ms`` older than this commit."""
        if not entry.makes_local_checkpoints:
            return False
        kept = self._kept.get(entry.spec.name)
        interval = entry.spec.config.local_checkpoint_interval_ms
        if not entry.checkpoints_on_interval or interval == 0 or kept is None:
            return True
        return checkpoint_id.millis - kept.millis >= interval

    def _make_local_checkpoint(self, name: str, checkpoint_id: CheckpointId) -> Path:
        """Store ``name``'s checkpoint directory for ``checkpoint_id``, made under the owner lock the caller holds;
        recorded first, so that the cleanup deletes what a failure half-way left."""
        self._local_checkpoints.setdefault(name, set()).add(checkpoint_id)
        directory = checkpoint_dir(self._stores[name].spec.store_dir, checkpoint_id)
        self._checkpoint_store(name, directory)
        return directory

    def _checkpoint_store(self, name: str, directory: Path) -> None:
        """Make one store's checkpoint directory, or fail the commit naming the store and the directory.

        A full disk or a directory that is no longer writable stops the snapshot half-way; what was written
        goes, so no later start mistakes the half directory for a snapshot, and the commit fails before any
        checkpoint could name it."""
        try:
            self.engines[name].checkpoint(directory)
        except Exception as error:
            try:
                delete_path(directory)
            except OSError as cleanup_error:
                log.warning(
                    "task '%s': cannot delete the failed snapshot '%s': %s", self.task_name, directory, cleanup_error
                )
            raise StateBackupError(
                f"task '{self.task_name}': cannot snapshot store '{name}' into '{directory}': {error}"
            ) from error

    def upload(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]
    ) -> dict[str, dict[str, str]]:
        return {
            key: manager.upload(checkpoint_id, markers.get(key, {})) for key, manager in self.backup_managers.items()
        }

    def changelog_offsets(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]
    ) -> dict[SystemStreamPartition, str]:
        offsets: dict[SystemStreamPartition, str] = {}
        for key, manager in self.backup_managers.items():
            offsets.update(manager.changelog_offsets(checkpoint_id, markers.get(key, {})))
        return offsets

    def write_local_checkpoint(self, checkpoint_id: CheckpointId, checkpoints: list[Checkpoint]) -> None:
        """Record in each checkpoint directory this commit's snapshot made what it holds (``OFFSET-v2``,
        ``CHECKPOINT-V2``); a commit that made none touches no file."""
        self._described = (checkpoint_id, checkpoints)
        for name, entry in self._stores.items():
            if checkpoint_id not in self._local_checkpoints.get(name, ()):
                continue
            directory = checkpoint_dir(entry.spec.store_dir, checkpoint_id)
            if not directory.is_dir():
                continue
            try:
                with owned(entry.spec.store_dir, self.container.writer):
                    self._write_local_checkpoint(entry, directory, checkpoints)
            except OSError as error:  # the directory went or filled up since the snapshot: name the store
                raise StateBackupError(
                    f"task '{self.task_name}': cannot record checkpoint {checkpoint_id} of store "
                    f"'{entry.spec.name}' in '{directory}': {error}"
                ) from error

    @staticmethod
    def _write_local_checkpoint(entry: _Store, directory: Path, checkpoints: list[Checkpoint]) -> None:
        for checkpoint in checkpoints:
            if isinstance(checkpoint, CheckpointV2):
                write_checkpoint_file(directory, checkpoint)
            elif isinstance(checkpoint, CheckpointV1) and entry.spec.changelog is not None:
                ssp = entry.spec.changelog
                # Samza's OFFSET-v2 holds the changelog offset itself, and no file for an empty changelog.
                _, offset = parse_v1_entry(checkpoint.offsets.get(ssp), f"changelog offset of store {entry.spec.name}")
                if offset is not None:
                    write_offset_file(directory, {ssp: offset})

    def cleanup(self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]) -> None:
        """After ``checkpoint_id`` is durable: backends delete what it no longer needs, then the checkpoint
        directories older than the newest durable one (this commit's, unless the store's local checkpoint was not
        due: ``_kept``) go: the snapshots this attempt made since (``_local_checkpoints``) and, at a store's first
        cleanup, what the container's one listing after every claim found, so a commit's cost does not grow with
        the container's tasks, whose directories share that directory. A store with none of them to delete takes
        no owner lock (nothing to fence: a zombie's commit already failed at its fenced checkpoint write), so a
        commit that made no local checkpoint touches no file here."""
        self._durable = checkpoint_id
        for key, manager in self.backup_managers.items():
            manager.cleanup(checkpoint_id, markers.get(key, {}))
        for name, entry in self._stores.items():
            if checkpoint_id in self._local_checkpoints.get(name, ()):
                self._kept[name] = checkpoint_id
            keep = self._kept.get(name, checkpoint_id)
            if entry.spec.persistent and entry.logged and self._has_older_checkpoints(name, keep):
                try:
                    with owned(entry.spec.store_dir, self.container.writer):
                        self._delete_older_checkpoints(name, entry.spec.store_dir, keep)
                except OSError as error:
                    raise StateBackupError(
                        f"task '{self.task_name}': cannot delete the checkpoint directories of store '{name}' "
                        f"older than {keep}: {error}"
                    ) from error
        self._dropped.after_checkpoint(checkpoint_id)

    def seal(self) -> None:
        """At a clean stop, the task's last commit ended: each store whose newest local checkpoint is older than
        the last durable checkpoint (its local checkpoint was not due: ``_local_checkpoint_due``) gets one for that
        checkpoint, so a restart on this host copies it in and replays nothing. Only when the stores hold exactly
        that checkpoint's state: its snapshot is the last one, nothing changed since, and it is durable (under
        exactly-once, once its transaction committed); otherwise nothing is made and a restart replays the
        changelog records after the newest directory, as after a crash. A failure (a full disk) is logged, not
        raised: the checkpoint is durable, only the restart's head start is lost. A crash half-way leaves a directory
        without its description files, which no restore reuses and the next attempt's first cleanup deletes."""
        described = self._described
        if described is None or self._held is not None or self.dirty:
            return
        checkpoint_id, checkpoints = described
        if not checkpoint_id == self._snapshotted == self._durable:
            return
        for name, entry in self._stores.items():
            kept = self._kept.get(name)
            if not entry.checkpoints_on_interval or kept is None or kept == checkpoint_id:
                continue
            store_dir = entry.spec.store_dir
            directory = checkpoint_dir(store_dir, checkpoint_id)
            try:
                with owned(store_dir, self.container.writer):
                    self._write_local_checkpoint(entry, self._make_local_checkpoint(name, checkpoint_id), checkpoints)
                    self._kept[name] = checkpoint_id
                    self._delete_older_checkpoints(name, store_dir, checkpoint_id)
            except (StateBackupError, OSError) as error:  # the checkpoint is durable: only the head start is lost
                log.warning(
                    "task '%s': cannot make the local checkpoint of store '%s' for checkpoint %s in '%s' at stop "
                    "(a restart replays the changelog records after the newest one instead): %s",
                    self.task_name, name, checkpoint_id, directory, error,
                )  # fmt: skip

    def _has_older_checkpoints(self, name: str, keep: CheckpointId) -> bool:
        """Whether a cleanup keeping ``keep`` may delete a directory of store ``name``: at its first cleanup (the
        container's listing), or when this attempt made another than ``keep`` since."""
        return name not in self._cleaned or not self._local_checkpoints.get(name, set()) <= {keep}

    def _delete_older_checkpoints(self, name: str, store_dir: Path, keep: CheckpointId) -> None:
        if name not in self._cleaned:  # a zombie may have snapshotted after the start's listing, before the claim
            delete_checkpoint_dirs(store_dir, keep=keep, listing=self.container.claimed_listing)
            self._cleaned.add(name)
        delete_checkpoint_dirs_among(store_dir, sorted(self._local_checkpoints.get(name, ())), keep=keep)
        self._local_checkpoints[name] = {keep}

    def close(self) -> None:
        for manager in self.backup_managers.values():
            manager.close()
        for engine in self.engines.values():
            engine.close()
        self.backup_managers.clear()
        self.engines.clear()


def _combined(writers: list[ChangelogWriter]) -> ChangelogWriter | None:
    if not writers:
        return None
    if len(writers) == 1:
        return writers[0]

    def write(key: bytes, value: bytes | None) -> None:
        for writer in writers:
            writer(key, value)

    return write


class ContainerStorageManager:
    def __enter__(self) -> Self:
        """Leaving stops the commit threads and closes the backends' factories."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __init__(
        self,
        config: Settings,
        job_model: JobModel,
        container_id: str,
        metadata_store: MetadataStore,
        systems: SystemAccess,
        serdes: SerdeRegistry | None = None,
        metrics: MetricsRegistry = NOOP_METRICS,
    ) -> None:
        self.config = config
        self.metrics = metrics
        """Where restores report their progress; the no-op registry when metrics are off."""
        self.job_model = job_model
        self.container_id = container_id
        self.metadata_store = metadata_store
        self.serdes = serdes or SerdeRegistry.from_config(config)
        self.systems = systems
        """The container's systems; its services own (and stop) them, not the storage."""
        self.layout = StoreLayout.of(config)
        self.writer = systems.writer
        """The container attempt the stores belong to (None outside a container): it works in its own
        directories, owns the task's checkpoint directories and claims its changelog partitions."""
        self.store_names = task_store_names(config)
        self.pause = CommitPauses.of(config)
        self.listing = ListedOnce()
        """The store directories as this container first found them, listed once for all its tasks' scans."""
        self.changelog_metadata: dict[SystemStreamPartition, SystemStreamPartitionMetadata] = {}
        """The offsets of every task's changelog partitions, read once the container claimed them (``restore``)."""
        self.claimed_listing: StoreDirListing = LIVE
        """The store directories as listed once after every task's claim (``restore`` sets it): what the tasks'
        first commit cleanups look in, for snapshots their zombies made before the claims fenced them; one
        listing for all of them, where a live listing per task cost a 1,000-task round tasks² names."""
        self._factories: dict[str, StateBackendFactory] = {}
        self._lock = threading.Lock()
        tasks = len(job_model.containers[container_id].tasks) if container_id in job_model.containers else 1
        self.tasks_in_container = tasks
        job = config.job
        self.commit_threads = min(max(2 * tasks, job.commit_thread_pool_size), job.commit_thread_pool_max_size)
        self.restore_threads = min(max(tasks, job.restore_thread_pool_size), job.restore_thread_pool_max_size)
        self._commit_executor: ThreadPoolExecutor | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.store_names)

    def factory(self, factory_class: type[StateBackendFactory]) -> StateBackendFactory:
        with self._lock:
            key = factory_class.marker_key()
            factory = self._factories.get(key)
            if factory is None:
                factory = self._factories[key] = factory_class()
            return factory

    @property
    def commit_executor(self) -> ThreadPoolExecutor:
        if self._commit_executor is None:
            self._commit_executor = ThreadPoolExecutor(self.commit_threads, thread_name_prefix="commit")
        return self._commit_executor

    def task_storage(self, task_name: TaskName, task_model: TaskModel) -> TaskStorageManager | None:
        return TaskStorageManager(self, task_name, task_model) if self.store_names else None

    def restore(self, tasks: Mapping[TaskName, tuple[TaskStorageManager, Checkpoint | None]]) -> None:
        """Claim every task's changelog partitions and read their offsets, then restore every task's stores in
        parallel, then start their backups (on this thread).

        The claims run here, one after the other, before any restore, and their offsets are then read in one call
        per system (``_describe``). Each claim opens a changelog partition the process then holds, and the embedded
        log's SQLite searches a list of the process's open files twice at every open: back to back on one thread
        those searches cost about half what they cost among the restore threads' other work, which evicted the list
        from the processor's caches, and neither the claims nor the offset questions queue on the producer's lock
        from 64 threads any more (the performance page: start-up took a tenth less CPU at 1,000 tasks, a seventh to
        a quarter less at 100). Fencing is unchanged: every changelog is claimed before anything reads its end."""
        if not tasks:
            return
        started = time.monotonic()
        for storage, _ in tasks.values():  # every changelog fenced before any restore reads one (see the docstring)
            storage.claim_changelogs()
        self.changelog_metadata.update(
            self._describe([ssp for storage, _ in tasks.values() for ssp in storage.changelogs])
        )
        with ThreadPoolExecutor(self.restore_threads, thread_name_prefix="restore") as pool:
            futures = [pool.submit(storage.restore, checkpoint) for storage, checkpoint in tasks.values()]
            failure: BaseException | None = None
            for future in futures:
                try:
                    future.result()
                except BaseException as error:  # every restore ends before the first failure is raised
                    failure = failure or error
            if failure is not None:
                raise failure
        self.claimed_listing = ListedOnce()  # listed at its first look, after every task claimed its directories
        for storage, checkpoint in tasks.values():
            storage.start(checkpoint)
        log.info(
            "container %s: stores of %d task(s) restored in %.2fs", self.container_id, len(tasks),
            time.monotonic() - started,
        )  # fmt: skip

    def _describe(
        self, ssps: list[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """The offsets of the claimed changelog partitions ``ssps``: per system, what its producer can tell through
        what the claims opened (the embedded log's), the rest in one question to its admin (Kafka: one lookup
        of them all, where the tasks' restores asked a partition each)."""
        by_system: dict[str, list[SystemStreamPartition]] = {}
        for ssp in ssps:
            by_system.setdefault(ssp.system, []).append(ssp)
        described: dict[SystemStreamPartition, SystemStreamPartitionMetadata] = {}
        for system, partitions in by_system.items():
            described.update(self.systems.producer(system).describe(partitions))
            if rest := [ssp for ssp in partitions if ssp not in described]:
                described.update(self.systems.admin(system).get_ssp_metadata(rest))
        return described

    def drain_commits(self) -> None:
        """Let an upload in flight finish before the stores it reads from are closed (closing them under
        it fails that commit half-way); commits not yet started are dropped: nothing was checkpointed."""
        if self._commit_executor is not None:
            self._commit_executor.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        if self._commit_executor is not None:
            self._commit_executor.shutdown(wait=False, cancel_futures=True)
        for factory in self._factories.values():
            factory.close()
