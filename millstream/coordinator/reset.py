"""What ``millstream job reset`` does: start a stopped job over, as Kafka Streams' application reset tool does.

A job's progress lives in several places, and a restart resumes from all of them together: its checkpoints
(the checkpoint manager: the metadata store or a Kafka topic), its startpoints, the control state of a
high-level job (watermarks and end-of-stream per task), its stores' local directories, their remote backups
(changelog streams, blob-store snapshots) and the intermediate streams between its stages. Removing only
some of them would restart it from a mix — fresh offsets over old state, or state restored from a changelog
no checkpoint names — so a reset removes every one, and the next run reads its inputs from
``samza.offset.default`` with empty stores, as on its first run.

What a reset keeps: the job's inputs and outputs, its generation (a reset job's next run still fences every
earlier writer), adjunct data stores (they follow their own input, with their own offsets) and the job's
run history (failures, restarts, statuses). A reset refuses while the job runs (a container of its current
generation is starting or running, as ``millstream job drain`` decides the opposite), because its containers
would write checkpoints and state back at their next commit. Every step is idempotent: a reset that failed
half-way is finished by running it again. Systems are reached through their ``SystemAdmin.clear_stream``, so
the embedded log and Kafka are reset alike.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from millstream.checkpoint.factory import checkpoint_manager
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, StreamSamzaConfig, parse_stream, task_store_names
from millstream.contracts import coordination
from millstream.contracts.blobstore import blob_store
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import StreamSpec
from millstream.control.state import CONTROL_STATE_NAMESPACE
from millstream.coordinator.drain import ACTIVE_STATES
from millstream.coordinator.services import DriverServices, driver_services
from millstream.errors import MillstreamError
from millstream.model import SystemStream
from millstream.startpoint.manager import FAN_OUT_NAMESPACE, READ_WRITE_NAMESPACE, STARTPOINT_STATUS_NAMESPACE
from millstream.storage.backends.blobstore.factory import BlobStoreStateBackendFactory
from millstream.storage.backends.blobstore.transfer import store_blob_prefix
from millstream.storage.backends.registry import backup_factories, restore_factories
from millstream.storage.changelog_partitions import CHANGELOG_PARTITION_NAMESPACE
from millstream.storage.layout import StoreLayout, task_dir_name

RESET_NAMESPACES = {
    READ_WRITE_NAMESPACE: "startpoints",
    FAN_OUT_NAMESPACE: "startpoints fanned out to tasks",
    STARTPOINT_STATUS_NAMESPACE: "startpoint failures",
    CONTROL_STATE_NAMESPACE: "control state (watermarks, end-of-stream)",
    CHANGELOG_PARTITION_NAMESPACE: "changelog partition assignments",
}
"""Metadata-store namespaces of the job's progress besides its checkpoints, and what they hold."""


class ResetRefusedError(MillstreamError):
    """The job is running; nothing was deleted."""

    exit_code = 2


@dataclass
class ResetPlan:
    """Everything a reset of one job deletes; what ``--dry-run`` lists."""

    job: str
    checkpointed_tasks: list[str] = field(default_factory=list)
    metadata: dict[str, int] = field(default_factory=dict)
    """Namespace → how many entries of it the job holds (only namespaces holding any)."""
    local_dirs: list[Path] = field(default_factory=list)
    """The tasks' store directories, checkpoint directories and ownership records on this host."""
    blobs: dict[str, list[str]] = field(default_factory=dict)
    """Blob-store prefix → the ids of the blobs under it."""
    streams: dict[SystemStream, str] = field(default_factory=dict)
    """Existing changelog and intermediate streams → what each is."""

    @property
    def empty(self) -> bool:
        return not (self.checkpointed_tasks or self.metadata or self.local_dirs or self.blobs or self.streams)

    def lines(self) -> Iterator[str]:
        """One line per thing deleted, naming it."""
        if self.checkpointed_tasks:
            yield f"checkpoints of {len(self.checkpointed_tasks)} task(s): {', '.join(self.checkpointed_tasks)}"
        for namespace, count in sorted(self.metadata.items()):
            yield f"{RESET_NAMESPACES[namespace]}: {count} entr{'y' if count == 1 else 'ies'} ({namespace})"
        for stream, what in sorted(self.streams.items(), key=lambda item: str(item[0])):
            yield f"stream {stream} ({what})"
        for prefix, blobs in sorted(self.blobs.items()):
            yield f"remote state: {len(blobs)} blob(s) under {prefix}"
        for directory in self.local_dirs:
            yield f"local state: {directory}"


def plan_reset(config: Settings, *, force: bool = False, services: DriverServices | None = None) -> ResetPlan:
    """What a reset of the job would delete; raises ``ResetRefusedError`` while the job runs (unless ``force``:
    its containers died without saying so)."""
    with driver_services(config, services) as driver:
        store = driver.store()
        if not force:
            _refuse_while_running(config, store)
        plan = ResetPlan(config.job.name)
        with checkpoint_manager(config, store) as checkpoints:
            checkpoints.start()
            plan.checkpointed_tasks = sorted(str(task) for task in checkpoints.read_all())
        plan.metadata = {ns: len(entries) for ns in RESET_NAMESPACES if (entries := store.all(ns))}
        model = coordination.latest_job_model(store)
        tasks = sorted(model.tasks) if model is not None else []
        plan.local_dirs = _local_dirs(config, [str(task) for task in tasks])
        plan.blobs = _blobs(config)
        plan.streams = _existing_streams(config, driver)
    return plan


def reset_job(
    config: Settings, *, dry_run: bool = False, force: bool = False, services: DriverServices | None = None
) -> ResetPlan:
    """Delete what ``plan_reset`` lists (nothing with ``dry_run``) and return it."""
    with driver_services(config, services) as driver:
        plan = plan_reset(config, force=force, services=driver)
        if not dry_run:
            _delete(config, plan, driver)
    return plan


def _delete(config: Settings, plan: ResetPlan, services: DriverServices) -> None:
    """Delete what ``plan`` lists: checkpoints and metadata first, then streams, blobs and local state."""
    store = services.store()
    with checkpoint_manager(config, store) as checkpoints:
        checkpoints.start()
        checkpoints.clear_checkpoints()
    for namespace in plan.metadata:
        store.delete_all(namespace, list(store.all(namespace)))
    store.flush()
    for stream in plan.streams:
        services.admin(stream.system).clear_stream(StreamSpec(stream.system, stream.stream, 1))
    if plan.blobs:
        blobs = blob_store(config)
        try:
            for ids in plan.blobs.values():
                for blob_id in ids:
                    blobs.delete(blob_id)
        finally:
            blobs.close()
    for entry in plan.local_dirs:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)


def _refuse_while_running(config: Settings, store: MetadataStore) -> None:
    generation = coordination.current_generation(store)
    active = sorted(
        container_id
        for container_id, status in coordination.container_statuses(store).items()
        if status.get("generation") == generation and status.get("state") in ACTIVE_STATES
    )
    if generation and active:
        raise ResetRefusedError(
            f"job '{config.job.name}' is running (generation {generation}: container(s) "
            f"{', '.join(active)} starting or running); stop or drain it first — nothing was deleted "
            "(--force resets anyway, when those containers are known to be dead)"
        )


def _local_dirs(config: Settings, tasks: list[str]) -> list[Path]:
    """The directories of the job's tasks in each store's base directory: the current store, its checkpoints
    (``<task>-<id>``) and attempts' directories (``<task>@...``). Only the job's own tasks' entries, because a
    configured base directory may be shared with other jobs."""
    layout = StoreLayout.of(config)
    names = {task_dir_name(task) for task in tasks}
    found: list[Path] = []
    for store in task_store_names(config):
        for base in sorted({layout.logged_base, layout.non_logged_base}):
            directory = base / store
            if not directory.is_dir():
                continue
            for entry in sorted(directory.iterdir()):
                if any(entry.name == name or entry.name.startswith((f"{name}-", f"{name}@")) for name in names):
                    found.append(entry)
    return found


def _blobs(config: Settings) -> dict[str, list[str]]:
    """The job's blobs, when any of its stores backs up to or restores from the blob store."""
    uses_blobs = any(
        issubclass(factory, BlobStoreStateBackendFactory)
        for store in task_store_names(config)
        for factory in (*backup_factories(config, store), *restore_factories(config, store))
    )
    if not uses_blobs:
        return {}
    prefix = store_blob_prefix(config, "", "")
    store = blob_store(config)
    try:
        ids = store.list(prefix)
        return {f"{store.describe()} {prefix}": ids} if ids else {}
    finally:
        store.close()


def _existing_streams(config: Settings, services: DriverServices) -> dict[SystemStream, str]:
    """The job's changelog and intermediate streams that exist."""
    wanted: dict[SystemStream, str] = {}
    for store in task_store_names(config):
        changelog = config.view(StoreConfig, store).changelog
        if changelog:
            wanted[parse_stream(changelog, f"stores.{store}.changelog")] = f"changelog of store '{store}'"
    suffix = ".samza.intermediate"
    for key in config:
        system, _, rest = key.removeprefix("systems.").partition(".streams.")
        if key.startswith("systems.") and rest.endswith(suffix):
            stream = SystemStream(system, rest[: -len(suffix)])
            if config.view(StreamSamzaConfig, stream).intermediate:
                wanted[stream] = "intermediate stream"
    existing: dict[SystemStream, str] = {}
    for system in sorted({stream.system for stream in wanted}):
        names = [stream.stream for stream in wanted if stream.system == system]
        counts = services.admin(system).partition_counts(names)
        existing.update({s: what for s, what in wanted.items() if s.system == system and s.stream in counts})
    return existing
