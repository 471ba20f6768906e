"""The contract between the engine and a state backend (Samza's SEP for async commit and pluggable state
backends). The engine imports only this module; a concrete backend is reached through its factory name
in config (``stores.<s>.backup.factories``, ``stores.<s>.restore.factories``, and the job-level
``stores.backup.factories`` / ``stores.restore.factories``).

A commit calls, per task and per backend: ``snapshot`` (while no write reaches the task's engines or
changelogs: on a commit thread while the task processes on with its writes held in the stores' object caches,
or on the task's thread when a store has none; it must be short), then ``upload`` (on a commit thread,
concurrently with processing), then the engine writes the checkpoints, then ``cleanup`` (idempotent: a restart
calls it again for the last checkpoint, to finish a cleanup a crash cut short). The markers ``upload`` returns
go into the V2 checkpoint under the factory's ``checkpoint_name``; they must name the exact state the snapshot
captured.

At start, per task: ``TaskRestoreManager.init(checkpoint)``, ``restore()`` (on a restore thread), then
the stores open, then ``TaskBackupManager.init(checkpoint)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from millstream.contracts.metrics import NOOP_METRICS, MetricsRegistry
from millstream.model import SystemStreamPartition, TaskName
from millstream.storage.layout import LIVE, StoreDirListing

if TYPE_CHECKING:
    from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId
    from millstream.config.settings import Settings
    from millstream.config.views import StoreConfig
    from millstream.contracts.metadata import MetadataStore
    from millstream.contracts.systems import (
        SystemAdmin,
        SystemConsumer,
        SystemProducer,
        SystemStreamPartitionMetadata,
        WriterToken,
    )
    from millstream.job_model import JobModel, TaskModel
    from millstream.storage.kv import ChangelogWriter, KeyValueStorageEngine


@dataclass(frozen=True)
class StoreSpec:
    """One store of one task, as a backend sees it."""

    name: str
    config: StoreConfig
    store_dir: Path
    """The current store directory (``<base>/<store>/<task>``); checkpoints are ``<store_dir>-<id>``."""
    persistent: bool
    changelog: SystemStreamPartition | None = None
    """This task's partition of the store's changelog, when ``stores.<s>.changelog`` is set."""


AdminSource = Callable[[str], "SystemAdmin"]
"""A started admin of a system, owned by the caller (the driver's services): what a backend's job-level admin
reads and creates streams with."""


class SystemAccess(Protocol):
    """The container's systems, for backends that read or write streams (the changelog): the container's
    services (``millstream.runtime.services.ContainerServices``), which own what it hands out."""

    @property
    def writer(self) -> WriterToken | None:
        """The container attempt its producers write for (None outside a container)."""

    def admin(self, system: str) -> SystemAdmin:
        """A started admin, shared and safe to use from several threads."""

    def producer(self, system: str) -> SystemProducer:
        """The container's state producer (it holds the transactional id): flushed for the task before every
        snapshot."""

    def new_consumer(self, system: str) -> SystemConsumer:
        """A fresh consumer the caller registers, starts and stops."""

    def new_producer(self, system: str) -> SystemProducer:
        """A fresh, started producer the caller flushes and stops."""


@dataclass
class TaskBackendContext:
    """What a backend's task managers get: the task, its stores for this backend, and the container's
    resources."""

    config: Settings
    job_model: JobModel
    task_name: TaskName
    task_model: TaskModel
    stores: Mapping[str, StoreSpec]
    metadata_store: MetadataStore
    systems: SystemAccess
    open_engine: Callable[[str], KeyValueStorageEngine] = field(repr=False)
    """Opens (once) a store's engine on its directory; restore managers that replay records use it."""
    pause: Callable[[str], None] = field(default=lambda point: None, repr=False)
    """Testing hook: a named point of a commit where a test may stop the process."""
    metrics: MetricsRegistry = field(default=NOOP_METRICS, repr=False)
    """The container's metrics: restore managers report their progress to it (``RestoreProgress``)."""
    listing: StoreDirListing = field(default=LIVE, repr=False)
    """How restores find the checkpoint directories earlier attempts left: the container's one listing."""
    changelog_metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata] = field(
        default_factory=dict, repr=False
    )
    """The offsets of every task's changelog partitions as the container read them once it had claimed them all,
    one call per system (``ContainerStorageManager.restore``): what a restore plans from; a partition missing here
    does not exist."""


class TaskBackupManager(ABC):
    """Backs up one task's stores at every commit."""

    backup_incomplete: bool = False
    """``init`` found that the last checkpoint's backup is no longer whole (part of it is gone): the task
    commits as soon as it starts, so a complete backup replaces it before anything needs it."""

    @abstractmethod
    def init(self, checkpoint: Checkpoint | None) -> None:
        """Start from the task's last checkpoint (None: there is none)."""

    @abstractmethod
    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, str]:
        """Capture the stores' state as of the commit's cut (nothing reaches the engines or changelogs meanwhile);
        store → marker for ``upload``.

        The engine has already flushed the task's producers and the stores, and made the checkpoint
        directories ``<store dir>-<checkpoint_id>`` of persistent stores.
        """

    @abstractmethod
    def upload(self, checkpoint_id: CheckpointId, markers: Mapping[str, str]) -> dict[str, str]:
        """Make the snapshot durable; store → marker for the checkpoint. Runs on a commit thread while
        the task keeps processing, so it must not touch the live stores."""

    @abstractmethod
    def cleanup(self, checkpoint_id: CheckpointId, markers: Mapping[str, str]) -> None:
        """Delete what the durable checkpoint ``checkpoint_id`` no longer needs. Idempotent."""

    def changelog_offsets(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, str]
    ) -> dict[SystemStreamPartition, str]:
        """Entries this backend adds to a V1 checkpoint (changelog SSP → ``<id>:<offset>``)."""
        return {}

    def store_writer(self, store: str) -> ChangelogWriter | None:
        """A function to receive every change of ``store`` as it is made; None when not needed."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


class TaskRestoreManager(ABC):
    """Brings one task's stores to the state its last checkpoint names, before the task starts."""

    reverted: int = 0
    """Keys the restore wrote back to undo writes no checkpoint covers (transactional state). The task
    commits as soon as it starts when this is not 0, so a checkpoint seals the revert at once."""
    lost_state: bool = False
    """The checkpoint's state could not be restored whole (what backs it up is gone) and a store started
    from what remained. The task commits as soon as it starts, so a checkpoint describes the state the
    task really has, with the input offsets of the last one."""

    @abstractmethod
    def init(self, checkpoint: Checkpoint | None) -> None:
        """Read what restoring needs (snapshot indexes, changelog offsets); fail early and clearly."""

    @abstractmethod
    def restore(self) -> None:
        """Restore every store of this manager; runs on a restore thread."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


class DroppedStores(ABC):
    """What a backend still keeps for one task's stores that the config no longer backs up with it (the
    store was removed, or its backup moved to another backend). Found at start; deleted only once the
    task's first new checkpoint is durable: until then the last checkpoint still names it, and a restart
    with the old config must be able to restore it."""

    @abstractmethod
    def find(self, checkpoint: Checkpoint | None) -> list[str]:
        """The dropped stores this backend keeps something of, given the task's last checkpoint."""

    @abstractmethod
    def delete(self) -> None:
        """Delete what ``find`` found; idempotent, so a failed delete is retried after a later checkpoint."""


class StateBackendAdmin(ABC):
    """Job-level resources of a backend (changelog streams, buckets), handled by the job coordinator."""

    @abstractmethod
    def create_resources(self) -> None:
        """Create what the job's stores need; idempotent."""

    @abstractmethod
    def validate_resources(self) -> None:
        """Raise a MillstreamError naming the resource when it is missing or does not fit."""


class StateBackendFactory(ABC):
    """Builds a backend's managers and admin; named in config by an alias or ``module:Class``."""

    checkpoint_name: ClassVar[str] = ""
    """The key of this backend's markers in V2 checkpoints (Samza's factory class name for built-ins);
    empty means the ``module:Class`` path of the factory."""
    requires_checkpoint_v2: ClassVar[bool] = False
    """True when restoring needs the markers only V2 checkpoints carry."""
    reads_local_checkpoint: ClassVar[bool] = True
    """Its snapshot or upload reads the store's local checkpoint directory, so every commit must make one.
    False for the changelog, whose records are the backup: its stores make one every
    ``stores.<s>.local.checkpoint.interval.ms`` only (``TaskStorageManager.snapshot``)."""
    commits_in_transaction: ClassVar[bool] = True
    """Its snapshot is durable when the container's transaction commits (exactly-once): what it backs up is
    written through the container's producer. False for a backend that uploads beside it (the blob store)."""

    @classmethod
    def marker_key(cls) -> str:
        return cls.checkpoint_name or f"{cls.__module__}:{cls.__qualname__}"

    def validate_store(self, config: Settings, store: str, store_config: StoreConfig, persistent: bool) -> None:  # noqa: B027
        """Raise a ConfigError naming the key when ``store`` cannot use this backend."""

    @abstractmethod
    def get_backup_manager(self, context: TaskBackendContext) -> TaskBackupManager: ...

    @abstractmethod
    def get_restore_manager(self, context: TaskBackendContext) -> TaskRestoreManager: ...

    @abstractmethod
    def get_admin(
        self,
        config: Settings,
        job_model: JobModel,
        metadata_store: MetadataStore,
        stores: Mapping[str, StoreConfig],
        admins: AdminSource,
    ) -> StateBackendAdmin:
        """The backend's job-level resources, prepared by the driver before containers start; ``admins`` gives a
        started admin of a system, owned by the driver (never stopped here)."""

    def dropped_stores(self, config: Settings, task_name: TaskName, backed_up: frozenset[str]) -> DroppedStores | None:
        """What this backend keeps for ``task_name``'s stores other than ``backed_up`` (the stores the config
        backs up with it); None when it keeps nothing a dropped store leaves behind (a changelog stays)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources shared by this factory's managers (thread pools, clients)."""
