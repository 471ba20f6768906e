"""A task instance's meters on a clock moved by hand: what one batch and one commit record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId
from millstream.config.settings import Settings
from millstream.contracts.metrics import Measurement, Registry, Sample
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.runtime.metering import Measurements, TaskMeters
from millstream.runtime.task_instance import ContainerContext, TaskInstance
from tests.runtime.fakes import DiscardingCollector
from tests.runtime.test_run_loop import SSP, TASK, ManualClock, NoCheckpoints, TimedProducers, TimedTask


def _samples(registry: Registry) -> dict[str, Sample]:
    return {sample.name: sample for sample in registry.snapshot()}


def test_a_batch_counts_messages_and_bytes_per_partition_and_times_the_processing() -> None:
    clock = ManualClock()
    registry = Registry({"container": "0"})
    instance = TaskInstance(
        TASK,
        TimedTask(clock, cost=0.125),
        frozenset({SSP}),
        ContainerContext(TASK, Settings({}), frozenset({SSP}), "0"),
        TimedProducers(clock, cost=0.25),
        DiscardingCollector(),
        NoCheckpoints(),
        {},
        {},
        clock=clock.monotonic,
        meters=TaskMeters(registry, TASK, frozenset({SSP})),
    )
    batch = [IncomingMessageEnvelope(SSP, str(n), None, b"x" * 10, size=10 + n) for n in range(4)]

    assert instance.process(SSP, batch) == 4
    instance.commit()

    samples = _samples(registry)
    assert samples["processed"].value == 4
    assert dict(samples["processed"].labels) == {
        "container": "0",
        "task": str(TASK),
        "system": "log",
        "stream": "in",
        "partition": "0",
    }
    assert samples["bytes_read"].value == 10 + 11 + 12 + 13
    assert (samples["process"].count, samples["process"].value) == (1, 0.5)
    assert (samples["commit"].count, samples["commit"].value) == (1, 0.25)


def test_without_meters_a_task_instance_records_nothing_anywhere() -> None:
    clock = ManualClock()
    instance = TaskInstance(
        TASK,
        TimedTask(clock),
        frozenset({SSP}),
        ContainerContext(TASK, Settings({}), frozenset({SSP}), "0"),
        TimedProducers(clock),
        DiscardingCollector(),
        NoCheckpoints(),
        {},
        {},
        clock=clock.monotonic,
    )
    assert instance.meters is None and not instance.context.metrics.enabled
    assert instance.process(SSP, [IncomingMessageEnvelope(SSP, "0", None, b"x")]) == 1


class TimedStorage:
    """Stores whose snapshot, upload and cleanup each cost a known time on the manual clock."""

    has_backups = False
    restorable_from_v1 = True
    can_hold = False
    dirty = True

    def __init__(self, clock: ManualClock, snapshot: float, upload: float, cleanup: float) -> None:
        self.clock = clock
        self.costs = {"snapshot": snapshot, "upload": upload, "cleanup": cleanup}

    def _spend(self, phase: str) -> None:
        self.clock.now += self.costs[phase]

    def write_back(self) -> None:
        pass

    def hold(self) -> None:
        raise AssertionError("can_hold is False: a commit never holds")

    def write_held(self) -> None:
        raise AssertionError("can_hold is False")

    def release(self) -> None:
        raise AssertionError("can_hold is False")

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, dict[str, str]]:
        self._spend("snapshot")
        return {}

    def upload(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]
    ) -> dict[str, dict[str, str]]:
        self._spend("upload")
        return {}

    def changelog_offsets(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]
    ) -> dict[SystemStreamPartition, str]:
        return {}

    def write_local_checkpoint(self, checkpoint_id: CheckpointId, checkpoints: list[Checkpoint]) -> None:
        pass

    def cleanup(self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]) -> None:
        self._spend("cleanup")

    def seal(self) -> None:
        pass


class TimedCheckpoints:
    def __init__(self, clock: ManualClock, cost: float) -> None:
        self.clock = clock
        self.cost = cost

    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        self.clock.now += self.cost * len(checkpoints)


def test_a_commit_times_each_of_its_phases_apart() -> None:
    clock = ManualClock()
    registry = Registry({"container": "0"})
    instance = TaskInstance(
        TASK,
        TimedTask(clock),
        frozenset({SSP}),
        ContainerContext(TASK, Settings({}), frozenset({SSP}), "0"),
        TimedProducers(clock, cost=1),
        DiscardingCollector(),
        TimedCheckpoints(clock, cost=8),
        {},
        {},
        storage=TimedStorage(clock, snapshot=2, upload=4, cleanup=16),
        clock=clock.monotonic,
        meters=TaskMeters(registry, TASK, frozenset({SSP})),
    )
    instance.process(SSP, [IncomingMessageEnvelope(SSP, "0", None, b"x")])
    instance.commit()

    phases = {
        dict(sample.labels)["phase"]: (sample.count, sample.value)
        for sample in registry.snapshot()
        if sample.name == "commit_phase"
    }
    # the checkpoint phase writes both versions (task.checkpoint.write.versions defaults to 1,2): 2 x 8
    assert phases == {"flush": (1, 1), "snapshot": (1, 2), "upload": (1, 4), "checkpoint": (1, 16), "cleanup": (1, 16)}
    assert {sample.name: sample.value for sample in registry.snapshot()}["commit"] == 39


class Measured:
    def __init__(self) -> None:
        self.values: list[Measurement] | None = [("wm", "gauge", {"operator": "map"}, 12.5), ("n", "counter", {}, 3)]

    def measurements(self) -> list[Measurement]:
        if self.values is None:
            raise RuntimeError("dictionary changed size during iteration")
        return self.values


def test_a_components_own_series_are_read_at_snapshot_time_and_keep_their_value_when_a_read_fails() -> None:
    registry = Registry({"container": "0"})
    task = Measured()
    registry.before_snapshot(Measurements(registry, task, {"task": "Partition 0"}).refresh)

    gauge, counter = registry.snapshot()
    assert (gauge.name, gauge.kind, dict(gauge.labels), gauge.value) == (
        "wm",
        "gauge",
        {"container": "0", "task": "Partition 0", "operator": "map"},
        12.5,
    )
    assert (counter.name, counter.kind, counter.value) == ("n", "counter", 3)
    task.values = None
    assert [s.value for s in registry.snapshot()] == [12.5, 3]
