"""A task's storage without a running container: open (restore) it, write to its stores, commit it
step by step, and "crash" it (drop it without closing) anywhere between two steps."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.metrics import NOOP_METRICS, MetricsRegistry
from millstream.contracts.systems import WriterToken
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.services import DriverServices
from millstream.job_model import JobModel
from millstream.model import SystemStreamPartition, TaskName
from millstream.runtime.services import ContainerServices
from millstream.storage.managers.resources import prepare_state_resources
from millstream.storage.managers.stores import ContainerStorageManager, TaskStorageManager
from millstream.systems.producers import ProducerPool
from tests.helpers import create_stream, job_config

TASK = TaskName("Partition 0")
INPUT = SystemStreamPartition("log", "in", 0)
SECOND_ATTEMPT = WriterToken("test-1", "0", 1, 2)
"""A container attempt after a first one, whose directories and partitions it claims."""


EVERY_COMMIT: dict[str, Any] = {"stores__counts__local__checkpoint__interval__ms": 0}
"""``state_config`` extras for tests of what each commit's local checkpoint directory does: the changelog's stores
otherwise make one every ``stores.<s>.local.checkpoint.interval.ms`` (10 s), and a test commits faster."""


def state_config(tmp_path: Path, backend: str, task: str = "tests.storage.jobs:CountPerKey", **extra: Any) -> Settings:
    values: dict[str, Any] = {
        "stores__counts__factory": "rocksdb",
        "stores__counts__key__serde": "string",
        "stores__counts__msg__serde": "json",
    }
    if backend in ("changelog", "both"):
        values["stores__counts__changelog"] = "log.counts-changelog"
    if backend in ("blobstore", "both"):
        values["stores__counts__backup__factories"] = "blobstore" if backend == "blobstore" else "changelog,blobstore"
        values["task__checkpoint__read__versions"] = "2,1"
    values.update(extra)
    return Settings.of(job_config(tmp_path, task=task, **values))


@dataclass
class Opened:
    container: ContainerStorageManager
    storage: TaskStorageManager
    services: ContainerServices

    @property
    def producers(self) -> ProducerPool:
        return self.services.producers

    @property
    def store(self) -> Any:
        return self.storage.stores["counts"]

    def close(self) -> None:
        self.storage.write_back()
        self.producers.flush(TASK)
        self.storage.close()
        self.container.close()
        self.services.close()


@dataclass
class EveryTask:
    """A container's storage over every task of a harness's job, unrestored (``open_every_task``)."""

    container: ContainerStorageManager
    storages: dict[TaskName, TaskStorageManager]
    services: ContainerServices

    def restore(self) -> None:
        """Restore every task from no checkpoint, as a container's start does."""
        self.container.restore({task: (storage, None) for task, storage in self.storages.items()})


class StateHarness:
    def __init__(self, config: Settings, partitions: int = 1) -> None:
        self.config = config = Settings.of(config)
        create_stream(config, "in", partitions)
        self.metadata = metadata_store(config)
        self.metadata.init()
        self.model: JobModel = JobCoordinator(config, self.metadata).plan().model
        with DriverServices(config) as driver:
            prepare_state_resources(config, self.metadata, self.model, driver.admin)
        self.checkpoint: CheckpointV2 | None = None
        """The last commit's V2 checkpoint (its V1 is ``v1``)."""
        self.offset = 0

    def open(
        self,
        checkpoint: Checkpoint | None = None,
        task: TaskName = TASK,
        writer: WriterToken | None = None,
        metrics: MetricsRegistry = NOOP_METRICS,
    ) -> Opened:
        """``writer``: open as that container attempt would (its own directories, claimed partitions); the
        restore reports to ``metrics``."""
        services = ContainerServices(self.config, writer=writer)
        container = ContainerStorageManager(self.config, self.model, "0", self.metadata, services, metrics=metrics)
        storage = container.task_storage(task, self.model.tasks[task])
        assert storage is not None
        container.restore({task: (storage, checkpoint if checkpoint is not None else self.checkpoint)})
        return Opened(container, storage, services)

    @contextmanager
    def open_every_task(self, writer: WriterToken = SECOND_ATTEMPT) -> Iterator[EveryTask]:
        """A container's storage over every task of the job, as attempt ``writer``; closed on leaving."""
        services = ContainerServices(self.config, writer=writer)
        container = ContainerStorageManager(self.config, self.model, "0", self.metadata, services)
        storages = {task: container.task_storage(task, model) for task, model in self.model.tasks.items()}
        every = EveryTask(container, {task: storage for task, storage in storages.items() if storage}, services)
        try:
            yield every
        finally:
            for storage in every.storages.values():
                storage.close()
            container.close()
            services.close()

    def commit(
        self,
        opened: Opened,
        *,
        stop_after: str | None = None,
        write_versions: tuple[int, ...] = (1, 2),
        now_ms: int | None = None,
    ) -> CheckpointV2 | None:
        """Snapshot → upload → checkpoint (kept as ``self.checkpoint``) → cleanup; ``stop_after`` ends
        the commit after ``snapshot``, ``upload`` or ``checkpoint`` as a crash there would; ``now_ms``: the
        commit's time (its checkpoint id's), default the clock's."""
        self.offset += 1
        checkpoint_id = CheckpointId.create() if now_ms is None else CheckpointId(now_ms, self.offset)
        opened.storage.write_back()
        opened.producers.flush(TASK)
        markers = opened.storage.snapshot(checkpoint_id)
        if stop_after == "snapshot":
            return None
        uploaded = opened.storage.upload(checkpoint_id, markers)
        if stop_after == "upload":
            return None
        offsets: dict[SystemStreamPartition, str | None] = {INPUT: str(self.offset)}
        v2 = CheckpointV2(checkpoint_id, offsets, uploaded)
        v1 = CheckpointV1({**offsets, **opened.storage.changelog_offsets(checkpoint_id, uploaded)})
        opened.storage.write_local_checkpoint(checkpoint_id, [c for c in (v1, v2) if c.version in write_versions])
        self.checkpoint = v2
        self.v1 = v1
        if stop_after == "checkpoint":
            return v2
        opened.storage.cleanup(checkpoint_id, uploaded)
        return v2


def restored_contents(
    config: Settings, task: TaskName, fresh_dir: Path, store: str = "counts", metrics: MetricsRegistry = NOOP_METRICS
) -> dict[Any, Any]:
    """Restore ``task``'s store from the job's last checkpoint into ``fresh_dir`` (as a new host would),
    reporting its progress to ``metrics``, and return what it holds."""
    from millstream.checkpoint.factory import checkpoint_manager
    from millstream.contracts.coordination import latest_job_model

    config = config.with_overrides(
        {"job.logged.store.base.dir": str(fresh_dir / "logged"), "job.non-logged.store.base.dir": str(fresh_dir / "n")}
    )
    metadata = metadata_store(config)
    metadata.init()
    model = latest_job_model(metadata)
    assert model is not None
    checkpoint = checkpoint_manager(config, metadata).read_last_checkpoint(task)
    services = ContainerServices(config)
    container = ContainerStorageManager(
        services.config, model, model.container_of(task), metadata, services, metrics=metrics
    )
    storage = container.task_storage(task, model.tasks[task])
    assert storage is not None
    try:
        container.restore({task: (storage, checkpoint)})
        return dict(storage.stores[store].all())
    finally:
        storage.close()
        container.close()
        services.close()
