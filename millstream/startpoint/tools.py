"""What operators (and the ``millstream startpoint`` command) use: validated set, list and delete.

Everything is checked before anything is written: the stream must exist in its system, partitions
must be in range, timestamps must parse, a task must be one of the job's. A refused request writes
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from millstream.config import Config
from millstream.config.views import StartpointConfig, adjunct_streams, parse_stream
from millstream.errors import StreamNotFoundError
from millstream.instants import parse_epoch_ms
from millstream.metadata import coordination
from millstream.metadata.base import MetadataStore
from millstream.metadata.coordination import latest_job_model
from millstream.metadata.factory import metadata_store
from millstream.model import SystemStreamPartition, TaskName
from millstream.startpoint.errors import StartpointError
from millstream.startpoint.manager import STARTPOINT_STATUS_NAMESPACE, StartpointManager, StoredStartpoint
from millstream.systems.registry import system_factory
from millstream.systems.startpoints import Startpoint


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds from ``1700000000000`` or an ISO 8601 instant (``2024-05-01T12:00:00Z``;
    without an offset it is taken as UTC)."""
    try:
        return parse_epoch_ms(text)
    except ValueError:
        raise StartpointError(
            f"'{text}' is not a timestamp: give epoch milliseconds or ISO 8601 such as 2024-05-01T12:00:00Z"
        ) from None


def target_partitions(config: Config, stream: str, partitions: Iterable[int] | None) -> list[SystemStreamPartition]:
    """The partitions named (all when None), refused if the stream is missing or one is out of range."""
    target = parse_stream(stream, "--stream")
    if target in adjunct_streams(config):
        raise StartpointError(
            f"'{target}' feeds an adjunct data store, which reads it from its own recorded offsets: startpoints do "
            f"not apply (set systems.{target.system}.streams.{target.stream}.samza.reset.offset=true to rebuild it)"
        )
    admin = system_factory(config, target.system).get_admin(target.system, config)
    admin.start()
    try:
        metadata = admin.get_system_stream_metadata([target.stream]).get(target.stream)
    finally:
        admin.stop()
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


def _manager(config: Config, store: MetadataStore) -> StartpointManager:
    return StartpointManager(store, StartpointConfig.of(config).max_age_ms)


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
    ssps = target_partitions(config, stream, partitions)
    store = metadata_store(config)
    try:
        _check_task(store, task_name, ssps)
        manager = _manager(config, store)
        for ssp in ssps:
            manager.write_startpoint(ssp, startpoint, task_name)
        if apply:
            coordination.request_restart(store, f"apply startpoints for {stream}")
    finally:
        store.close()
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
    store = metadata_store(config)
    try:
        manager = _manager(config, store)
        failures = {task: orjson.loads(data) for task, data in sorted(store.all(STARTPOINT_STATUS_NAMESPACE).items())}
        statuses = coordination.container_statuses(store)
        running = any(status.get("state") in ("starting", "running") for status in statuses.values())
        return StartpointListing(manager.list_startpoints(), manager.all_fan_outs(), failures, running)
    finally:
        store.close()


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
    store = metadata_store(config)
    try:
        manager = _manager(config, store)
        wanted = set(target_partitions(config, stream, partitions)) if stream else None
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
    finally:
        store.close()
