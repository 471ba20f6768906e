"""RunLoop's scheduling, on a clock the tests move by hand: when the window, commit and stop-check timers
fire, how long a poll may wait, where a batch is cut for a timer, and what an overrun does to the timers.

Time only moves when a fake moves it: a poll waits (up to its timeout, or until the next scripted arrival),
a message costs what its task says, a flush costs what the producers say. Intervals are multiples of
1/16 s, so every instant is exact in floating point and the assertions compare instants with ``==``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from millstream.api.task import MessageCollector, StreamTask, TaskCoordinator, WindowableTask
from millstream.checkpoint.checkpoint import Checkpoint
from millstream.config.settings import Settings
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.runtime.run_loop import DeadLetterPolicy, RunLoop, RunLoopSettings
from millstream.runtime.task_instance import ContainerContext, TaskInstance
from tests.runtime.fakes import DiscardingCollector

TASK = TaskName("Partition 0")
SSP = SystemStreamPartition("log", "in", 0)
START = 64.0
"""The clock's reading when the loop starts: not zero, so an instant measured from zero would show."""
HORIZON = START + 60
"""No test runs this long: a loop still polling then would never have stopped."""


class ManualClock:
    def __init__(self) -> None:
        self.now = START

    def monotonic(self) -> float:
        return self.now


class ScriptedConsumers:
    """Envelopes that become readable at given instants. A poll returns what is readable, else waits (moves
    the clock) until the first arrival or the end of its timeout, whichever is first."""

    def __init__(self, clock: ManualClock, arrivals: list[tuple[float, IncomingMessageEnvelope]]) -> None:
        self.clock = clock
        self.arrivals = sorted(arrivals, key=lambda arrival: arrival[0])
        self.polls: list[tuple[float, float]] = []
        """(instant, timeout) of each poll."""

    def poll(self, active: set[SystemStreamPartition], timeout: float) -> Mapping[SystemStreamPartition, list[Any]]:
        clock = self.clock
        assert clock.now < HORIZON, "the loop should have ended long ago"
        self.polls.append((clock.now, timeout))
        first = next((at for at, envelope in self.arrivals if envelope.ssp in active), float("inf"))
        clock.now = min(clock.now + timeout, max(clock.now, first))
        ready = [(at, envelope) for at, envelope in self.arrivals if at <= clock.now and envelope.ssp in active]
        batches: dict[SystemStreamPartition, list[Any]] = {}
        for arrival in ready:
            self.arrivals.remove(arrival)
            batches.setdefault(arrival[1].ssp, []).append(arrival[1])
        return batches


class TimedTask(StreamTask, WindowableTask):
    """Records when each message starts processing and when each window runs; a message costs ``cost`` seconds."""

    def __init__(self, clock: ManualClock, cost: float = 0.0, shutdown_in_window: bool = False) -> None:
        self.clock = clock
        self.cost = cost
        self.shutdown_in_window = shutdown_in_window
        self.events: list[tuple[str, float]] = []

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        self.events.append((f"process {envelope.offset}", self.clock.now))
        self.clock.now += self.cost

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        self.events.append(("window", self.clock.now))
        if self.shutdown_in_window:
            coordinator.shutdown()

    def windows(self) -> list[float]:
        return [at for event, at in self.events if event == "window"]


class TimedProducers:
    """Records when each commit flushes (every commit of a task flushes first); a flush costs ``cost`` seconds."""

    def __init__(self, clock: ManualClock, cost: float = 0.0) -> None:
        self.clock = clock
        self.cost = cost
        self.flushes: list[float] = []

    def flush(self, source: str) -> None:
        self.flushes.append(self.clock.now)
        self.clock.now += self.cost


class NoCheckpoints:
    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        pass


class NoDeadLetters:
    def producer(self, system: str) -> DiscardingSender:
        raise AssertionError("no message of these tests is undecodable")


class DiscardingSender:
    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        pass


class HeldOutput:
    """Output held back for batching from the start, for ``linger`` seconds; records when it was sent and
    whether because the loop found its input drained."""

    def __init__(self, clock: ManualClock, linger: float) -> None:
        self.clock = clock
        self.deadline = clock.now + linger
        self.sent: list[tuple[float, bool]] = []

    def send_lingering(self, drained: bool = False) -> float | None:
        if self.sent:
            return None
        if drained or self.clock.now >= self.deadline:
            self.sent.append((self.clock.now, drained))
            return None
        return self.deadline - self.clock.now


class StopProbe:
    """``stop_requested``: records when it is asked; true from ``at`` on."""

    def __init__(self, clock: ManualClock, at: float) -> None:
        self.clock = clock
        self.at = at
        self.asked: list[float] = []

    def __call__(self) -> bool:
        self.asked.append(self.clock.now)
        return self.clock.now >= self.at


def envelope(offset: int) -> IncomingMessageEnvelope:
    return IncomingMessageEnvelope(SSP, str(offset), b"k", b"v")


def make_loop(
    clock: ManualClock,
    consumers: ScriptedConsumers,
    task: TimedTask,
    producers: TimedProducers,
    stop: StopProbe,
    *,
    window_ms: int = 250,
    commit_ms: int = 1000,
    poll_interval_ms: int = 125,
    stop_check_ms: int = 500,
) -> RunLoop:
    context = ContainerContext(TASK, Settings({}), frozenset({SSP}), "0")
    instance = TaskInstance(
        TASK,
        task,
        frozenset({SSP}),
        context,
        producers,
        DiscardingCollector(),
        NoCheckpoints(),
        {},
        {},
        clock=clock.monotonic,
    )
    return RunLoop(
        consumers,
        [instance],
        {},
        DeadLetterPolicy(False, None, NoDeadLetters()),
        RunLoopSettings(window_ms, commit_ms, poll_interval_ms, stop_check_ms),
        stop,
        clock=clock,
    )


class Harness:
    """A loop over one task and one partition, with every fake it runs on at hand."""

    def __init__(
        self,
        arrivals: list[tuple[float, IncomingMessageEnvelope]] | None = None,
        *,
        stop_at: float = float("inf"),
        cost: float = 0.0,
        flush_cost: float = 0.0,
        shutdown_in_window: bool = False,
        **settings: int,
    ) -> None:
        self.clock = ManualClock()
        self.consumers = ScriptedConsumers(self.clock, arrivals or [])
        self.task = TimedTask(self.clock, cost, shutdown_in_window)
        self.producers = TimedProducers(self.clock, flush_cost)
        self.stop = StopProbe(self.clock, stop_at)
        self.loop = make_loop(self.clock, self.consumers, self.task, self.producers, self.stop, **settings)

    def run(self) -> None:
        self.loop.run()


def at(seconds: float) -> float:
    return START + seconds


def test_window_fires_every_window_ms_from_the_start_while_no_input_arrives() -> None:
    h = Harness(stop_at=at(1.0), window_ms=250)
    h.run()
    assert h.task.windows() == [at(0.25), at(0.5), at(0.75), at(1.0)]


def test_commit_fires_every_commit_ms_and_once_more_when_the_loop_stops() -> None:
    h = Harness(stop_at=at(1.25), window_ms=0, commit_ms=500, stop_check_ms=250)
    h.run()
    assert h.producers.flushes == [at(0.5), at(1.0), at(1.25)]


def test_zero_window_ms_and_commit_ms_disable_those_timers_but_not_the_final_commit() -> None:
    h = Harness(stop_at=at(2.0), window_ms=0, commit_ms=0)
    h.run()
    assert h.task.windows() == []
    assert h.producers.flushes == [at(2.0)]


def test_stop_is_asked_at_the_start_and_every_stop_check_ms_and_a_yes_ends_the_loop() -> None:
    h = Harness(stop_at=at(1.0), window_ms=0, commit_ms=0, stop_check_ms=500)
    h.run()
    assert h.stop.asked == [at(0.0), at(0.5), at(1.0)]
    assert h.loop.stopped_by_request
    assert h.clock.now == at(1.0), "nothing runs after the stop but the final commit"


def test_a_poll_waits_no_longer_than_until_the_next_timer_however_long_the_poll_interval() -> None:
    h = Harness(stop_at=at(1.0), window_ms=250, commit_ms=1000, poll_interval_ms=1000, stop_check_ms=500)
    h.run()
    # the first poll comes with the stop check due at the start: it does not wait at all
    assert h.consumers.polls == [(at(0.0), 0.0), (at(0.0), 0.25), (at(0.25), 0.25), (at(0.5), 0.25), (at(0.75), 0.25)]


def test_a_batch_is_cut_when_a_timer_falls_due_and_its_rest_processed_before_the_partition_is_polled_again() -> None:
    h = Harness([(at(0.125), envelope(n)) for n in range(4)], stop_at=at(1.0), cost=0.125, window_ms=250)
    h.run()
    assert h.task.events == [
        ("process 0", at(0.125)),
        ("window", at(0.25)),
        ("process 1", at(0.25)),
        ("process 2", at(0.375)),
        ("window", at(0.5)),
        ("process 3", at(0.5)),
        ("window", at(0.75)),
        ("window", at(1.0)),
    ]
    assert [instant for instant, _ in h.consumers.polls] == [at(0.0), at(0.0), at(0.625), at(0.75), at(0.875)]
    assert (h.loop.stats.first_message_at, h.loop.stats.last_message_at) == (at(0.125), at(0.625))


def test_a_message_overrunning_several_windows_gets_one_late_window_and_the_next_is_window_ms_after_that() -> None:
    h = Harness([(at(0.125), envelope(0))], stop_at=at(1.0), cost=0.5625, window_ms=250, stop_check_ms=500)
    h.run()
    # processing ends at 0.6875: the windows due at 0.25 and 0.5 collapse into one then, and the timers restart
    # from it (the stop check missed at 0.5 is next due at 1.1875)
    assert h.task.windows() == [at(0.6875), at(0.9375), at(1.1875)]
    assert h.stop.asked == [at(0.0), at(0.6875), at(1.1875)]


def test_the_next_commit_is_due_commit_ms_after_the_previous_commit_ended() -> None:
    h = Harness(stop_at=at(2.0), flush_cost=0.25, window_ms=0, commit_ms=500, stop_check_ms=500)
    h.run()
    # each commit takes 0.25 s; the stop probe answers after the commit due at 2.0, so the final one is at 2.25
    assert h.producers.flushes == [at(0.5), at(1.25), at(2.0), at(2.25)]
    assert h.loop.stats.commit_seconds == 1.0
    # the stop check keeps its own cadence: asked late after a commit, it is still next due 0.5 s after 0.5
    assert h.stop.asked == [at(0.0), at(0.75), at(1.0), at(1.5), at(2.25)]


def test_a_shutdown_requested_in_window_ends_the_loop_before_the_commit_timer_due_at_the_same_instant() -> None:
    h = Harness(shutdown_in_window=True, window_ms=250, commit_ms=250)
    h.run()
    # the task's own commit for its shutdown, then the loop's final one; not the timer's commit in between
    assert h.producers.flushes == [at(0.25), at(0.25)]
    assert h.task.windows() == [at(0.25)]
    assert not h.loop.stopped_by_request


def test_the_loop_ends_with_a_final_commit_once_every_partition_reached_end_of_stream() -> None:
    arrivals = [(at(0.125), envelope(0)), (at(0.375), IncomingMessageEnvelope.end_of_stream(SSP))]
    h = Harness(arrivals, window_ms=250, commit_ms=1000)
    h.run()
    assert h.task.events == [("process 0", at(0.125)), ("window", at(0.25))]
    # the ended task's output flushed at the end of its round, its final commit, then the loop's last commit
    assert h.producers.flushes == [at(0.375), at(0.375), at(0.375)]
    assert h.clock.now == at(0.375)


def test_output_held_for_batching_is_sent_once_a_poll_finds_no_input_and_not_while_input_is_waiting() -> None:
    """Lingering only pays while more records would join the batch: once the input is drained, the held output
    goes at once instead of ``linger.ms`` later (issue 31: output visible in milliseconds)."""
    clock = ManualClock()
    consumers = ScriptedConsumers(clock, [(at(0.0), envelope(n)) for n in range(3)] + [(at(0.5), envelope(3))])
    task = TimedTask(clock, cost=0.0625)
    output = HeldOutput(clock, linger=10.0)
    loop = make_loop(clock, consumers, task, TimedProducers(clock), StopProbe(clock, at(1.0)))
    loop.output = output
    loop.run()
    processed = [instant for event, instant in task.events if event.startswith("process")]
    assert processed[:3] == [at(0.0), at(0.0625), at(0.125)]
    assert output.sent == [(at(0.1875), True)], "sent by the first poll that found no input, not after 10 s"
    # while held, a poll looks without waiting; once the output went, the loop waits for input again
    assert consumers.polls[:3] == [(at(0.0), 0.0), (at(0.1875), 0.0), (at(0.1875), 0.0625)]
