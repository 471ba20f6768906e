"""Shared set-up of the state benchmarks: a one-task job with a RocksDB store, opened and committed
without a running container, so that each benchmark times exactly the step it is about."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV2
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.prepare import prepare
from millstream.coordinator.services import DriverServices
from millstream.embedded.log.factory import LogSystemFactory
from millstream.job_model import ContainerModel, JobModel, TaskModel
from millstream.model import SystemStreamPartition, TaskName
from millstream.runtime.services import ContainerServices
from millstream.storage.managers.resources import prepare_state_resources
from millstream.storage.managers.stores import ContainerStorageManager, TaskStorageManager
from millstream.systems.producers import ProducerPool

TASK = TaskName("Partition 0")
INPUT = SystemStreamPartition("log", "bench", 0)


def bench_config(root: Path, **extra: Any) -> Settings:
    values = {
        "job.name": "bench-state",
        "job.data.dir": str(root / "data"),
        "systems.log.path": str(root / "log"),
        "systems.log.samza.offset.default": "oldest",
        "systems.log.producer.batch.size": 5000,
        "task.class": "benchmarks.tasks:NoOp",
        "task.inputs": "log.bench",
        "stores.counts.factory": "rocksdb",
        "stores.counts.changelog": "log.counts-changelog",
        "stores.counts.backup.factories": "changelog,blobstore",
        "task.checkpoint.read.versions": "2,1",
        **extra,
    }
    return prepare(Settings(values))


@dataclass
class TaskState:
    container: ContainerStorageManager
    storage: TaskStorageManager
    services: ContainerServices

    @property
    def producers(self) -> ProducerPool:
        return self.services.producers

    def close(self) -> None:
        self.storage.close()
        self.container.close()
        self.services.close()


class StateJob:
    """One task (``Partition 0``) of a job whose input is ``log.bench``, without Spark or containers."""

    def __init__(self, config: Settings) -> None:
        self.config = config
        admin = LogSystemFactory().get_admin("log", config)
        admin.create_stream(StreamSpec("log", "bench", 1))
        self.metadata: MetadataStore = metadata_store(config)
        self.metadata.init()
        self.model = JobModel(1, {"0": ContainerModel("0", {TASK: TaskModel(TASK, frozenset({INPUT}))})})
        with DriverServices(config) as driver:
            prepare_state_resources(config, self.metadata, self.model, driver.admin)

    def open(self, checkpoint: Checkpoint | None, config: Settings | None = None) -> tuple[TaskState, float]:
        """Restore the task's stores from ``checkpoint``; returns them and the seconds it took."""
        config = config or self.config
        services = ContainerServices(config)
        container = ContainerStorageManager(config, self.model, "0", self.metadata, services)
        storage = container.task_storage(TASK, self.model.tasks[TASK])
        assert storage is not None
        started = time.perf_counter()
        container.restore({TASK: (storage, checkpoint)})
        return TaskState(container, storage, services), time.perf_counter() - started

    @staticmethod
    def commit(state: TaskState, offset: int) -> CheckpointV2:
        checkpoint_id = CheckpointId.create()
        state.storage.write_back()
        state.producers.flush(TASK)
        markers = state.storage.snapshot(checkpoint_id)
        uploaded: Mapping[str, Mapping[str, str]] = state.storage.upload(checkpoint_id, markers)
        checkpoint = CheckpointV2(checkpoint_id, {INPUT: str(offset)}, uploaded)
        state.storage.write_local_checkpoint(checkpoint_id, [checkpoint])
        state.storage.cleanup(checkpoint_id, uploaded)
        return checkpoint


KEY_FORMAT = b"key%010d"
"""The keys ``fill_store`` writes: ``key`` and ten digits."""

KEY_SIZE = len(KEY_FORMAT % 0)
"""Bytes of each key ``fill_store`` writes."""


def fill_store(
    state: TaskState, keys: int, value_size: int = 16, batch: int = 20_000, *, random_order: bool = False
) -> None:
    """Write ``keys`` distinct keys through the task's store (and so its changelog): in key order, or with
    ``random_order`` in a shuffled (seeded) order, as a real changelog holds them."""
    store = state.storage.stores["counts"]
    value = b"v" * value_size
    order = list(range(keys))
    if random_order:
        random.Random(36).shuffle(order)
    for start in range(0, keys, batch):
        store.put_all([(KEY_FORMAT % i, value) for i in order[start : start + batch]])
