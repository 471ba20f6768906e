"""The three runtime hooks the high-level API stands on, at the level of one TaskInstance."""

from __future__ import annotations

from millstream.api.task import (
    CheckpointListener,
    EndOfStreamListenerTask,
    PartitionEndOfStreamListenerTask,
    StreamTask,
)
from millstream.config.settings import Settings
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.runtime.task_instance import ContainerContext, TaskInstance
from tests.runtime.fakes import DiscardingCollector

A = SystemStreamPartition("log", "a", 0)
B = SystemStreamPartition("log", "b", 0)


class Events(list):
    pass


class Producers:
    def __init__(self, events: Events) -> None:
        self.events = events

    def flush(self, source: str) -> None:
        self.events.append("flush")


class Checkpoints:
    def __init__(self, events: Events) -> None:
        self.events = events

    def write_task_checkpoints(self, task_name, checkpoints) -> None:
        for checkpoint in checkpoints:
            self.events.append(("checkpoint", dict(checkpoint.offsets)))


class ListeningTask(StreamTask, EndOfStreamListenerTask, PartitionEndOfStreamListenerTask, CheckpointListener):
    def __init__(self, events: Events, end_on: str | None = None) -> None:
        self.events = events
        self.end_on = end_on

    def process(self, envelope, collector, coordinator):
        self.events.append(("process", envelope.offset))
        if envelope.message == self.end_on:
            coordinator.end_of_stream(B)

    def on_partition_end_of_stream(self, ssp, collector, coordinator):
        self.events.append(("partition ended", ssp.stream))

    def on_end_of_stream(self, collector, coordinator):
        self.events.append("all ended")

    def before_checkpoint(self):
        self.events.append("before checkpoint")


def instance(task, events: Events) -> TaskInstance:
    ssps = frozenset({A, B})
    context = ContainerContext(TaskName("Partition 0"), Settings(), ssps, "0")
    return TaskInstance(
        TaskName("Partition 0"),
        task,
        ssps,
        context,
        Producers(events),
        DiscardingCollector(),
        Checkpoints(events),
        {},
        {},
    )


def envelope(ssp: SystemStreamPartition, offset: int, message: str = "m") -> IncomingMessageEnvelope:
    return IncomingMessageEnvelope(ssp, str(offset), None, message)


def test_each_partition_end_is_announced_once_before_the_task_wide_end_of_stream():
    events = Events()
    task_instance = instance(ListeningTask(events), events)
    task_instance.mark_end_of_stream(A)
    task_instance.mark_end_of_stream(A)
    assert events == [("partition ended", "a")]
    task_instance.mark_end_of_stream(B)
    assert events[1:3] == [("partition ended", "b"), "all ended"]
    assert task_instance.finished


def test_a_task_can_declare_a_partition_ended_and_finishes_when_all_are():
    events = Events()
    task_instance = instance(ListeningTask(events, end_on="last"), events)
    task_instance.mark_end_of_stream(A)
    consumed = task_instance.process(B, [envelope(B, 0), envelope(B, 1, "last"), envelope(B, 2)])
    assert consumed == 2, "the batch stops once the task finished"
    assert B in task_instance.end_of_stream and task_instance.finished
    assert ("partition ended", "b") in events and "all ended" in events


def test_before_checkpoint_runs_after_the_flush_and_before_the_checkpoint_is_written():
    events = Events()
    task_instance = instance(ListeningTask(events), events)
    task_instance.process(A, [envelope(A, 0)])
    task_instance.commit()
    assert events[1:3] == ["flush", "before checkpoint"]
    assert events[3:] and all(event == ("checkpoint", {A: "0"}) for event in events[3:])  # one per version


def test_before_checkpoint_runs_even_when_no_offset_moved():
    events = Events()
    task_instance = instance(ListeningTask(events), events)
    task_instance.commit()
    assert events == ["flush", "before checkpoint"]
