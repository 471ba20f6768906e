"""What ``millstream job status`` reports: the job model, container states and lag per partition."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from millstream.adjunct.manager import ADSTORE_OFFSETS_NAMESPACE
from millstream.adjunct.recovery import RecordedOffsets
from millstream.checkpoint.factory import checkpoint_manager
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.coordination import latest_job_model
from millstream.contracts.metadata import MetadataStore
from millstream.coordinator.services import DriverServices, driver_services
from millstream.job_model import JobModel
from millstream.model import SystemStreamPartition
from millstream.startpoint.manager import STARTPOINT_STATUS_NAMESPACE


@dataclass(frozen=True)
class PartitionLag:
    task: str
    ssp: SystemStreamPartition
    checkpointed: str | None
    upcoming: str | None
    lag: int | None
    """Messages between the checkpoint and the end of the partition; None when offsets are not numeric."""
    sealed: bool = False
    """The partition is complete (a sealed log stream): a job reading it ends at its end."""


@dataclass(frozen=True)
class AdjunctPosition:
    """Where an adjunct store instance had read a partition at its last commit."""

    store: str
    owner: str
    ssp: SystemStreamPartition
    position: str
    upcoming: str | None
    lag: int | None
    committed_ms: int
    version: str | None


@dataclass(frozen=True)
class DriverState:
    """What became of the driver of the current generation, judged from its heartbeat record (``at`` against
    this host's clock: drivers and the hosts that ask are assumed to keep time within seconds)."""

    state: str
    """``alive``, ``lost`` (no heartbeat for ``job.driver.liveness.timeout.ms``), ``ended`` or ``unknown`` (no
    heartbeat of this generation: a run by a version without them, or a run that never started)."""
    at_ms: int | None = None
    """The last heartbeat's time (``lost``: since when the driver is lost; ``ended``: when the run ended)."""
    where: str = ""

    def describe(self, now_ms: int) -> str:
        if self.at_ms is None:
            return self.state
        when = datetime.fromtimestamp(self.at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        if self.state == "alive":
            return f"alive ({self.where}, last heartbeat {max(0, now_ms - self.at_ms) / 1000:.0f}s ago)"
        return f"{self.state} at {when} ({self.where})"


def driver_state(record: dict[str, Any] | None, generation: int, now_ms: int, timeout_ms: int) -> DriverState:
    """The driver's state from its heartbeat record (``coordination.driver_heartbeat``)."""
    if record is None or record.get("generation") != generation:
        return DriverState("unknown")
    at_ms, where = int(record.get("at", 0)), f"pid {record.get('pid')} on host {record.get('host')}"
    if record.get("ended"):
        return DriverState("ended", at_ms, where)
    if timeout_ms > 0 and now_ms - at_ms >= timeout_ms:
        return DriverState("lost", at_ms, where)
    return DriverState("alive", at_ms, where)


def current_driver(config: Settings, store: MetadataStore) -> DriverState:
    """The state of the driver of the job's current generation, now."""
    return driver_state(
        coordination.driver_heartbeat(store),
        coordination.current_generation(store),
        int(time.time() * 1000),
        config.job.driver_liveness_timeout_ms,
    )


@dataclass
class JobStatus:
    model: JobModel | None
    generation: int
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)
    lag: list[PartitionLag] = field(default_factory=list)
    adjunct: list[AdjunctPosition] = field(default_factory=list)
    """Adjunct partitions are not checkpointed with the tasks: their positions come from the stores."""
    startpoint_failures: dict[str, dict[str, str]] = field(default_factory=dict)
    """Per task, startpoints its last start could not resolve (it started from its checkpoint instead)."""
    driver: DriverState = field(default_factory=lambda: DriverState("unknown"))


def job_status(config: Settings, services: DriverServices | None = None) -> JobStatus:
    """The job's status, read with the driver's ``services`` (or services of this call alone)."""
    with driver_services(config, services) as driver:
        store = driver.store()
        model = latest_job_model(store)
        status = JobStatus(model, coordination.current_generation(store), coordination.container_statuses(store))
        status.driver = current_driver(config, store)
        status.startpoint_failures = {
            task: orjson.loads(data) for task, data in sorted(store.all(STARTPOINT_STATUS_NAMESPACE).items())
        }
        if model is None:
            return status
        status.lag, metadata = _partition_lags(config, driver, model)
        status.adjunct = _adjunct_positions(store, metadata)
        return status


def partition_lags(config: Settings, model: JobModel, services: DriverServices | None = None) -> list[PartitionLag]:
    """Per partition of ``model`` (published or only planned), its checkpoint and what is left to read."""
    with driver_services(config, services) as driver:
        return _partition_lags(config, driver, model)[0]


def _partition_lags(
    config: Settings, services: DriverServices, model: JobModel
) -> tuple[list[PartitionLag], dict[SystemStreamPartition, Any]]:
    manager = checkpoint_manager(config, services.store(), None)
    manager.start()
    checkpoints = manager.read_all()
    manager.stop()
    ssps = {ssp for task in model.tasks.values() for ssp in task.ssps}
    metadata = {}
    for system in sorted({ssp.system for ssp in ssps}):
        metadata.update(services.admin(system).get_ssp_metadata(ssp for ssp in ssps if ssp.system == system))
    adjunct = set(config.adjunct_streams())
    lags = []
    for task_name in sorted(model.tasks, key=lambda n: n.sort_key()):
        checkpoint = checkpoints.get(task_name)
        for ssp in sorted(model.tasks[task_name].ssps):
            if ssp.system_stream in adjunct:
                continue
            offset = checkpoint.offsets.get(ssp) if checkpoint else None
            info = metadata.get(ssp)
            upcoming = info.upcoming_offset if info else None
            sealed = bool(info and info.sealed)
            lags.append(PartitionLag(str(task_name), ssp, offset, upcoming, _lag(offset, upcoming, info), sealed))
    return lags, metadata


def _adjunct_positions(store: MetadataStore, metadata: dict[SystemStreamPartition, Any]) -> list[AdjunctPosition]:
    positions = []
    for key, data in sorted(store.all(ADSTORE_OFFSETS_NAMESPACE).items()):
        recorded = RecordedOffsets.from_bytes(data)
        if recorded is None:
            continue
        name, _, owner = key.partition("/")
        for ssp, (kind, offset) in sorted(recorded.positions.items()):
            info = metadata.get(ssp)
            upcoming = info.upcoming_offset if info else None
            lag = _lag(offset, upcoming, info) if kind == "last" else _lag_from_next(offset, upcoming)
            position = offset if kind == "last" else f"(next {offset})"
            positions.append(
                AdjunctPosition(name, owner, ssp, position, upcoming, lag, recorded.committed_ms, recorded.version)
            )
    return positions


def _lag_from_next(next_offset: str, upcoming: str | None) -> int | None:
    try:
        return None if upcoming is None else max(0, int(upcoming) - int(next_offset))
    except ValueError:
        return None


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
