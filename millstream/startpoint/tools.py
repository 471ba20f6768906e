"""What operators (and the ``millstream startpoint`` command) use: validated set, list and delete.

Everything is checked before anything is written: the stream must exist in its system, partitions
must be in range, timestamps must parse, a task must be one of the job's. A refused request writes
nothing.

Each operation comes in two forms. ``write_startpoints``, ``startpoint_listing`` and ``remove_startpoints`` take
the driver's services (``StartpointServices``: ``DriverServices`` of a ``Job`` or a CLI command), whose admins
and metadata-store connection they use and leave open. ``set_startpoints``, ``list_startpoints`` and
``delete_startpoints`` take a config, as users called them before the ``Job`` façade, and open (and close)
an admin and a connection of their own for the call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

import orjson

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.config.views import parse_stream
from millstream.contracts import coordination
from millstream.contracts.coordination import latest_job_model
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.startpoints import Startpoint
from millstream.contracts.systems import SystemAdmin
from millstream.errors import StreamNotFoundError
from millstream.instants import parse_epoch_ms
from millstream.model import SystemStreamPartition, TaskName
from millstream.startpoint.errors import StartpointError
from millstream.startpoint.manager import STARTPOINT_STATUS_NAMESPACE, StartpointManager, StoredStartpoint
from millstream.startpoint.settings import StartpointConfig


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds from ``1700000000000`` or an ISO 8601 instant (``2024-05-01T12:00:00Z``;
    without an offset it is taken as UTC)."""
    try:
        return parse_epoch_ms(text)
    except ValueError:
        raise StartpointError(
            f"'{text}' is not a timestamp: give epoch milliseconds or ISO 8601 such as 2024-05-01T12:00:00Z"
        ) from None


class StartpointServices(Protocol):
    """What the operations need of the driver (``DriverServices`` has it): the job's config, a system's admin
    (started; its owner stops it) and the calling thread's metadata-store connection (its owner closes it)."""

    @property
    def config(self) -> Settings: ...

    def admin(self, system: str) -> SystemAdmin: ...

    def store(self) -> MetadataStore: ...


class _CallServices:
    """An admin and a connection for one config-only call: what ``DriverServices`` does, for this layer's
    compatible entry points, which sit below the coordinator that owns the driver's services."""

    def __init__(self, config: Settings) -> None:
        self.config = config
        self._admins: dict[str, SystemAdmin] = {}
        self._store: MetadataStore | None = None

    def admin(self, system: str) -> SystemAdmin:
        if system not in self._admins:
            admin = system_factory(self.config, system).get_admin(system, self.config)
            admin.start()
            self._admins[system] = admin
        return self._admins[system]

    def store(self) -> MetadataStore:
        if self._store is None:
            self._store = metadata_store(self.config)
        return self._store

    def close(self) -> None:
        for admin in self._admins.values():
            admin.stop()
        if self._store is not None:
            self._store.close()


@contextmanager
def _call_services(config: Config) -> Iterator[_CallServices]:
    services = _CallServices(Settings.of(config))  # a user's plain Config still works: parsed once here
    try:
        yield services
    finally:
        services.close()


def target_partitions(
    services: StartpointServices, stream: str, partitions: Iterable[int] | None
) -> list[SystemStreamPartition]:
    """The partitions named (all when None), refused if the stream is missing or one is out of range."""
    config = services.config
    target = parse_stream(stream, "--stream")
    if target in config.adjunct_streams():
        raise StartpointError(
            f"'{target}' feeds an adjunct data store, which reads it from its own recorded offsets: startpoints do "
            f"not apply (set systems.{target.system}.streams.{target.stream}.samza.reset.offset=true to rebuild it)"
        )
    metadata = services.admin(target.system).get_system_stream_metadata([target.stream]).get(target.stream)
    if metadata is None:
        raise StreamNotFoundError(target.system, target.stream)
    chosen = sorted(set(partitions)) if partitions is not None else sorted(metadata.partitions)
    if not chosen:
        raise StartpointError(f"no partitions given for '{target}'")
    outside = [p for p in chosen if p not in metadata.partitions]
    if outside:
        raise StartpointError(
            f"partition {outside[0]} of '{target}' does not exist (it has partitions 0-{metadata.partition_count - 1})"
        )
    return [target.partition(p) for p in chosen]


def _manager(config: Settings, store: MetadataStore) -> StartpointManager:
    return StartpointManager(store, config.view(StartpointConfig).max_age_ms)


def _check_task(store: MetadataStore, task_name: str | None, ssps: list[SystemStreamPartition]) -> None:
    if task_name is None:
        return
    model = latest_job_model(store)
    if model is None:
        return  # the job has not run yet: its task names are not known, so any is accepted
    task = model.tasks.get(TaskName(task_name))
    if task is None:
        known = ", ".join(str(name) for name in sorted(model.tasks, key=TaskName.sort_key))
        raise StartpointError(f"the job has no task '{task_name}' (tasks: {known})")
    foreign = [ssp for ssp in ssps if ssp not in task.ssps]
    if foreign:
        raise StartpointError(f"task '{task_name}' does not consume {foreign[0]}")


def set_startpoints(
    config: Config,
    stream: str,
    startpoint: Startpoint,
    *,
    partitions: Iterable[int] | None = None,
    task_name: str | None = None,
    apply: bool = False,
) -> list[SystemStreamPartition]:
    """Write ``startpoint`` for the given partitions of ``stream`` (all when None), optionally for one task.

    With ``apply`` a running job restarts its containers gracefully to use it; otherwise it takes
    effect the next time the job starts.
    """
    with _call_services(config) as services:
        return write_startpoints(services, stream, startpoint, partitions=partitions, task_name=task_name, apply=apply)


def write_startpoints(
    services: StartpointServices,
    stream: str,
    startpoint: Startpoint,
    *,
    partitions: Iterable[int] | None = None,
    task_name: str | None = None,
    apply: bool = False,
) -> list[SystemStreamPartition]:
    """``set_startpoints`` with the driver's services."""
    ssps = target_partitions(services, stream, partitions)
    store = services.store()
    _check_task(store, task_name, ssps)
    manager = _manager(services.config, store)
    for ssp in ssps:
        manager.write_startpoint(ssp, startpoint, task_name)
    if apply:
        coordination.request_restart(store, f"apply startpoints for {stream}")
    return ssps


@dataclass(frozen=True)
class StartpointListing:
    pending: list[StoredStartpoint]
    """Written but not yet fanned out to tasks (stale ones included, marked)."""
    fanned_out: dict[TaskName, dict[SystemStreamPartition, Startpoint]]
    """Given to tasks, waiting for the commit that follows their first processed message."""
    failures: dict[str, dict[str, str]]
    """Per task, startpoints the last start could not resolve, and why."""
    job_running: bool


def list_startpoints(config: Config) -> StartpointListing:
    """The job's startpoints: pending, fanned out to tasks, failed to resolve."""
    with _call_services(config) as services:
        return startpoint_listing(services)


def startpoint_listing(services: StartpointServices) -> StartpointListing:
    """``list_startpoints`` with the driver's services."""
    store = services.store()
    manager = _manager(services.config, store)
    failures = {task: orjson.loads(data) for task, data in sorted(store.all(STARTPOINT_STATUS_NAMESPACE).items())}
    statuses = coordination.container_statuses(store)
    running = any(status.get("state") in ("starting", "running") for status in statuses.values())
    return StartpointListing(manager.list_startpoints(), manager.all_fan_outs(), failures, running)


def delete_startpoints(
    config: Config,
    stream: str | None = None,
    *,
    partitions: Iterable[int] | None = None,
    task_name: str | None = None,
    fanned_out: bool = False,
) -> int:
    """Delete pending startpoints (all, or of one stream / partitions / task); with ``fanned_out``
    also those already given to tasks. Returns how many were deleted."""
    with _call_services(config) as services:
        return remove_startpoints(services, stream, partitions=partitions, task_name=task_name, fanned_out=fanned_out)


def remove_startpoints(
    services: StartpointServices,
    stream: str | None = None,
    *,
    partitions: Iterable[int] | None = None,
    task_name: str | None = None,
    fanned_out: bool = False,
) -> int:
    """``delete_startpoints`` with the driver's services."""
    store = services.store()
    manager = _manager(services.config, store)
    wanted = set(target_partitions(services, stream, partitions)) if stream else None
    deleted = 0
    for entry in manager.list_startpoints():
        if wanted is not None and entry.ssp not in wanted:
            continue
        if task_name is not None and entry.task_name != task_name:
            continue
        manager.delete_startpoint(entry.ssp, entry.task_name)
        deleted += 1
    if fanned_out:
        for task, fan_out in manager.all_fan_outs().items():
            if task_name is not None and task != task_name:
                continue
            chosen = [ssp for ssp in fan_out if wanted is None or ssp in wanted]
            manager.remove_fan_out_for_task_ssps(task, chosen)
            deleted += len(chosen)
    return deleted
