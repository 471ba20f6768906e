"""Building blocks shared by the runtime, Spark and CLI tests: jobs on the log system in a temp dir."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from millstream.composition.systems import system_factory
from millstream.config.core import Config
from millstream.config.settings import Settings
from millstream.config.views import resolve_paths
from millstream.contracts.systems import StreamSpec
from millstream.model import SystemStream
from millstream.operators.planner import expand_application
from millstream.testing import read_stream, write_stream

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float, message: str, interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; fail with ``message`` after
    ``timeout`` seconds. Tests wait for the condition they need, never for a fixed time: a fixed sleep is
    too short on a loaded machine and wasted everywhere else."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {message}")
        time.sleep(interval)


def job_config(data_dir: Path, task: str = "tests.jobs:PassThrough", **extra: Any) -> Settings:
    values = {
        "job.name": "test",
        "job.data.dir": str(data_dir),
        "task.class": task,
        "task.inputs": "log.in",
        "task.commit.ms": "200",
        "systems.log.samza.offset.default": "oldest",
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
    }
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return Settings.of(unvalidated(Settings(values)))  # already Settings: `of` only narrows the type


def create_stream(config: Config, stream: str, partitions: int) -> None:
    settings = Settings.of(config)  # a test may hand a config it loaded itself
    admin = system_factory(settings, "log").get_admin("log", settings)
    admin.start()
    try:
        admin.create_stream(StreamSpec("log", stream, partitions))
    finally:
        admin.stop()


def seal(config: Config, stream: str) -> None:
    settings = Settings.of(config)  # a test may hand a config it loaded itself
    admin = system_factory(settings, "log").get_admin("log", settings)
    admin.start()
    try:
        admin.seal_stream(stream)
    finally:
        admin.stop()


def fill(config: Settings, stream: str, partitions: int, per_partition: int, start: int = 0) -> set[tuple[int, int]]:
    """Write ``per_partition`` messages to every partition; returns the (partition, value) pairs written."""
    written: set[tuple[int, int]] = set()
    for partition in range(partitions):
        values = [(f"k{partition}", start + i) for i in range(per_partition)]
        write_stream(config, SystemStream("log", stream), values, partition=partition)
        written.update((partition, value) for _, value in values)
    return written


def output_origins(config: Settings, stream: str = "out") -> list[tuple[int, int]]:
    """(input partition, input value) of every output message, duplicates included."""
    by_partition = read_stream(config, SystemStream("log", stream))
    return [(value["p"], value["v"]) for pairs in by_partition.values() for _, value in pairs]


def checkpointed_offsets(config: Settings, stream: str, partitions: int) -> dict[int, str | None]:
    """Per partition of the log stream ``stream``, the input offset the last checkpoint of the task
    ``Partition <n>`` names (None: no checkpoint, or none of that partition)."""
    from millstream.checkpoint.factory import checkpoint_manager
    from millstream.composition.metadata import metadata_store
    from millstream.model import SystemStreamPartition, TaskName

    store = metadata_store(config)
    checkpoints = checkpoint_manager(config, store)
    checkpoints.start()
    try:
        offsets: dict[int, str | None] = {}
        for partition in range(partitions):
            checkpoint = checkpoints.read_last_checkpoint(TaskName(f"Partition {partition}"))
            ssp = SystemStreamPartition("log", stream, partition)
            offsets[partition] = checkpoint.offsets.get(ssp) if checkpoint is not None else None
        return offsets
    finally:
        checkpoints.stop()
        store.close()


def unvalidated(config: Settings) -> Settings:
    """``config`` shaped as ``prepare`` shapes it (absolute paths, an application expanded) but not
    validated, so a test can hand a bad config to the code that must refuse it."""
    return expand_application(Settings.of(resolve_paths(config)))


def end_version(config: Settings, stream: SystemStream, label: str) -> int:
    """Seal version ``label`` of an adjunct stream with end-of-version markers, as ``Job.adstores.end_version``
    does for a store, through the driver's services of this call."""
    from millstream.adjunct.markers import write_end_of_version
    from millstream.coordinator.services import DriverServices

    with DriverServices(config) as services:
        return write_end_of_version(services, config, stream, label)
