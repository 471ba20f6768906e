"""TaskInstance's processing deadline: a batch is cut once the run loop's timers fall due, and the clock
is read in strides while messages are fast, so a fast task does not pay a clock reading per message and a
slow one is cut as soon as it passes the deadline. The clock is moved by the tasks themselves."""

from __future__ import annotations

from typing import Any

from millstream.runtime.task_instance import MAX_STRIDE, TaskInstance
from tests.runtime.test_task_commit import SSP, Clock, Events, envelope, make_task


class CountingClock(Clock):
    def __init__(self) -> None:
        super().__init__()
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        return self.now


class TimedTask:
    """Each message takes ``cost(index)`` seconds on the clock."""

    def __init__(self, clock: Clock, cost: Any) -> None:
        self.clock = clock
        self.cost = cost
        self.seen = 0

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.clock.now += self.cost(self.seen)
        self.seen += 1


def instance_of(task: TimedTask, clock: Clock) -> TaskInstance:
    instance, _ = make_task(Events(), None, clock=clock, task=task)
    return instance


def batch(size: int) -> list[Any]:
    return [envelope(offset) for offset in range(size)]


def test_fast_messages_read_the_clock_once_per_stride_not_once_per_message():
    clock = CountingClock()
    instance = instance_of(TimedTask(clock, lambda index: 0.0), clock)
    assert instance.process(SSP, batch(10_000), deadline=clock.now + 1) == 10_000
    assert clock.readings <= 10_000 // MAX_STRIDE + 10


def test_a_slow_task_is_cut_at_the_first_message_past_its_deadline():
    clock = Clock()
    task = TimedTask(clock, lambda index: 0.010)
    instance = instance_of(task, clock)
    assert instance.process(SSP, batch(100), deadline=clock.now + 0.035) == 4
    assert dict(instance.last_processed) == {SSP: "3"}, "the offset recorded is the last message processed"


def test_a_task_whose_messages_turn_slow_is_cut_within_one_stride_of_its_deadline():
    clock = Clock()
    task = TimedTask(clock, lambda index: 0.0 if index < 500 else 1.0)
    instance = instance_of(task, clock)
    consumed = instance.process(SSP, batch(1000), deadline=clock.now + 0.5)
    assert 501 <= consumed <= 500 + MAX_STRIDE
    assert task.seen == consumed


def test_a_deadline_already_past_lets_one_message_through():
    clock = Clock()
    instance = instance_of(TimedTask(clock, lambda index: 0.0), clock)
    assert instance.process(SSP, batch(10), deadline=clock.now - 1) == 1
