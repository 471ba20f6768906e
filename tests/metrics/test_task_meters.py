"""A task instance's meters on a clock moved by hand: what one batch and one commit record."""

from __future__ import annotations

from millstream.config import Config
from millstream.metrics.registry import Registry, Sample
from millstream.model import IncomingMessageEnvelope
from millstream.runtime.metering import TaskMeters
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
        ContainerContext(TASK, Config({}), frozenset({SSP}), "0"),
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
        ContainerContext(TASK, Config({}), frozenset({SSP}), "0"),
        TimedProducers(clock),
        DiscardingCollector(),
        NoCheckpoints(),
        {},
        {},
        clock=clock.monotonic,
    )
    assert instance.meters is None and not instance.context.metrics.enabled
    assert instance.process(SSP, [IncomingMessageEnvelope(SSP, "0", None, b"x")]) == 1
