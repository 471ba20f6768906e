"""What ``millstream job status`` reports: the job model, container states and lag per partition."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from millstream.checkpoint.factory import checkpoint_manager
from millstream.config import Config
from millstream.metadata import coordination
from millstream.metadata.factory import metadata_store
from millstream.model import SystemStreamPartition
from millstream.runtime.job_model import JobModel, latest_job_model
from millstream.startpoint.manager import STARTPOINT_STATUS_NAMESPACE
from millstream.systems.registry import system_factory


@dataclass(frozen=True)
class PartitionLag:
    task: str
    ssp: SystemStreamPartition
    checkpointed: str | None
    upcoming: str | None
    lag: int | None
    """Messages between the checkpoint and the end of the partition; None when offsets are not numeric."""


@dataclass
class JobStatus:
    model: JobModel | None
    generation: int
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)
    lag: list[PartitionLag] = field(default_factory=list)
    startpoint_failures: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per task, startpoints its last start could not resolve (it started from its checkpoint instead)."""


def job_status(config: Config) -> JobStatus:
    store = metadata_store(config)
    try:
        model = latest_job_model(store)
        status = JobStatus(model, coordination.current_generation(store), coordination.container_statuses(store))
        status.startpoint_failures = {
            task: orjson.loads(data) for task, data in sorted(store.all(STARTPOINT_STATUS_NAMESPACE).items())
        }
        if model is None:
            return status
        manager = checkpoint_manager(config, store, None)
        manager.start()
        checkpoints = manager.read_all()
        manager.stop()
        ssps = {ssp for task in model.tasks.values() for ssp in task.ssps}
        metadata = {}
        for system in sorted({ssp.system for ssp in ssps}):
            admin = system_factory(config, system).get_admin(system, config)
            admin.start()
            try:
                metadata.update(admin.get_ssp_metadata(ssp for ssp in ssps if ssp.system == system))
            finally:
                admin.stop()
        for task_name in sorted(model.tasks, key=lambda n: n.sort_key()):
            checkpoint = checkpoints.get(task_name)
            for ssp in sorted(model.tasks[task_name].ssps):
                offset = checkpoint.offsets.get(ssp) if checkpoint else None
                info = metadata.get(ssp)
                upcoming = info.upcoming_offset if info else None
                status.lag.append(PartitionLag(str(task_name), ssp, offset, upcoming, _lag(offset, upcoming, info)))
        return status
    finally:
        store.close()


def _lag(checkpointed: str | None, upcoming: str | None, info: Any) -> int | None:
    try:
        if upcoming is None:
            return None
        if checkpointed is None:
            oldest = info.oldest_offset if info and info.oldest_offset is not None else upcoming
            return int(upcoming) - int(oldest)
        return max(0, int(upcoming) - int(checkpointed) - 1)
    except ValueError:
        return None
