"""The final commits of tasks that end about the same time, made by the run loop as one group.

Several tasks of a container reach end-of-stream in one round of the run loop: each handles its end (its listeners
run, its output is sent and flushed) before any of them pays for its final commit, and then every one of them is
committed, each checkpoint after its own snapshot. A failing commit fails as its own task's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import pytest

from millstream.api.task import EndOfStreamListenerTask, MessageCollector, StreamTask, TaskCoordinator
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId
from millstream.config.settings import Settings
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.runtime.run_loop import FINAL_COMMIT_SLICE_S, DeadLetterPolicy, RunLoop, RunLoopSettings
from millstream.runtime.task_instance import ContainerContext, TaskInstance
from millstream.runtime.transaction import ContainerTransaction
from millstream.storage.errors import CommitFailedError
from tests.runtime.fakes import DiscardingCollector


class Events(list[str]):
    """Every step of every task, in the order they happened."""


class Ending(StreamTask, EndOfStreamListenerTask):
    def __init__(self, name: str, events: Events) -> None:
        self.name = name
        self.events = events

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        self.events.append(f"process {self.name} {envelope.offset}")

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        self.events.append(f"end-of-stream {self.name}")


class Producers:
    def __init__(self, events: Events) -> None:
        self.events = events

    def flush(self, source: str) -> None:
        self.events.append(f"flush {source}")


class Checkpoints:
    def __init__(self, events: Events) -> None:
        self.events = events
        self.written: dict[str, list[Checkpoint]] = {}

    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        self.events.append(f"checkpoint {task_name}")
        self.written.setdefault(str(task_name), []).extend(checkpoints)


class Storage:
    """A task's stores, writing through (so the commit runs on the loop's thread), that may fail to snapshot."""

    has_backups = False
    restorable_from_v1 = True
    can_hold = False

    def __init__(self, name: str, events: Events, fail: bool = False) -> None:
        self.name = name
        self.events = events
        self.fail = fail
        self.dirty = True
        self.threads: list[str] = []
        self.advance: Callable[[], None] = lambda: None
        """What a snapshot costs: moves the test's clock."""

    def write_back(self) -> None:
        pass

    def hold(self) -> None:
        raise AssertionError("can_hold is False")

    def write_held(self) -> None:
        pass  # nothing was held: a final commit's snapshot on the commit thread

    def release(self) -> None:
        pass

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, dict[str, str]]:
        self.events.append(f"snapshot {self.name}")
        self.threads.append(threading.current_thread().name)
        self.advance()
        if self.fail:
            raise OSError(f"disk full under {self.name}")
        self.dirty = False
        return {}

    def upload(self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]) -> dict[str, Any]:
        return {}

    def changelog_offsets(self, checkpoint_id: CheckpointId, markers: Any) -> dict[SystemStreamPartition, str]:
        return {}

    def write_local_checkpoint(self, checkpoint_id: CheckpointId, checkpoints: list[Checkpoint]) -> None:
        pass

    def cleanup(self, checkpoint_id: CheckpointId, markers: Any) -> None:
        pass

    def seal(self) -> None:
        pass


class ManualClock:
    """The loop's and the tasks' clock, moved only by the commits' snapshots."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class Rounds:
    """A poll per round from a script: round ``n`` returns ``script[n]`` (nothing once the script ran out).
    Records each poll's timeout and what had happened before it."""

    def __init__(self, events: Events, script: list[dict[SystemStreamPartition, list[IncomingMessageEnvelope]]]):
        self.events = events
        self.script = script
        self.polls: list[float] = []

    def poll(self, active: set[SystemStreamPartition], timeout: float) -> Mapping[SystemStreamPartition, list[Any]]:
        assert len(self.polls) < 50, "the loop should have ended long ago"
        self.polls.append(timeout)
        self.events.append(f"poll {len(self.polls)}")
        batch = self.script.pop(0) if self.script else {}
        return {ssp: list(envelopes) for ssp, envelopes in batch.items() if ssp in active}


class Output:
    def send_lingering(self, drained: bool = False) -> None:
        return None


class TransactionOutput:
    def __init__(self, events: Events) -> None:
        self.events = events

    def commit_transaction(self) -> None:
        self.events.append("transaction committed")


class NoDeadLetters:
    def producer(self, system: str) -> Any:
        raise AssertionError("nothing is undecodable here")


def ssp(n: int) -> SystemStreamPartition:
    return SystemStreamPartition("log", "in", n)


def message(n: int, offset: int) -> IncomingMessageEnvelope:
    return IncomingMessageEnvelope(ssp(n), str(offset), b"k", b"v")


def last(n: int, offset: int) -> list[IncomingMessageEnvelope]:
    """A partition's last message and its end-of-stream, in one batch."""
    return [message(n, offset), IncomingMessageEnvelope.end_of_stream(ssp(n))]


class Container:
    """A run loop over tasks ``T0`` .. ``Tn-1``, task ``Ti`` reading partition ``i`` alone."""

    def __init__(
        self,
        count: int,
        script: list[dict[SystemStreamPartition, list[IncomingMessageEnvelope]]],
        *,
        failing: str | None = None,
        exactly_once: bool = False,
        loop: bool = True,
        executor: Executor | None = None,
        commit_cost: float = 0.0,
    ) -> None:
        self.events = Events()
        self.clock = ManualClock()
        self.checkpoints = Checkpoints(self.events)
        self.consumers = Rounds(self.events, script)
        producers = Producers(self.events)
        self.transaction = ContainerTransaction(TransactionOutput(self.events)) if exactly_once else None
        self.tasks: list[TaskInstance] = []
        self.storages: list[Storage] = []
        for n in range(count):
            name = TaskName(f"T{n}")
            partitions = frozenset({ssp(n)})
            self.storages.append(Storage(str(name), self.events, fail=str(name) == failing))
            self.storages[-1].advance = lambda: self.clock.advance(commit_cost)
            self.tasks.append(
                TaskInstance(
                    name,
                    Ending(str(name), self.events),
                    partitions,
                    ContainerContext(name, Settings({}), partitions, "0"),
                    producers,
                    DiscardingCollector(),
                    self.checkpoints,
                    {},
                    {},
                    storage=self.storages[-1],
                    transaction=self.transaction,
                    commit_executor=executor,
                    clock=self.clock.monotonic,
                )
            )
        if self.transaction is not None:
            self.transaction.tasks = self.tasks
        if not loop:
            return
        self.loop = RunLoop(
            self.consumers,
            self.tasks,
            {},
            DeadLetterPolicy(False, None, NoDeadLetters()),
            RunLoopSettings(window_ms=0, commit_ms=0, poll_interval_ms=60_000),
            lambda: False,
            clock=self.clock,
            output=Output(),
            transaction=self.transaction,
        )

    def first(self, event: str) -> int:
        return self.events.index(event)

    def after(self, event: str) -> list[str]:
        return self.events[self.first(event) + 1 :]


def ending_together() -> list[dict[SystemStreamPartition, list[IncomingMessageEnvelope]]]:
    """T0, T1 and T2 end in round 1; T3 reads on in round 2, which ends no task, and ends in round 3."""
    return [
        {ssp(0): last(0, 0), ssp(1): last(1, 0), ssp(2): last(2, 0), ssp(3): [message(3, 0)]},
        {ssp(3): [message(3, 1)]},
        {ssp(3): last(3, 2)},
    ]


def test_tasks_ending_in_one_round_all_handle_end_of_stream_before_any_final_commit():
    container = Container(4, ending_together())
    container.loop.run()
    ends = [container.first(f"end-of-stream T{n}") for n in range(3)]
    commits = [container.first(f"snapshot T{n}") for n in range(3)]
    assert max(ends) < min(commits), container.events
    # and their output was flushed at the end of that round, before the commits too
    flushes = [container.first(f"flush T{n}") for n in range(3)]
    assert max(ends) < min(flushes) and max(flushes) < min(commits) < container.first("poll 3")


def test_the_groups_final_commits_are_made_in_the_next_round_that_ends_no_task_polling_without_waiting():
    container = Container(4, ending_together())
    container.loop.run()
    # round 2 ended no task: the group of round 1 is committed in it, before round 3's poll
    assert container.first("poll 2") < container.first("snapshot T0") < container.first("poll 3")
    assert container.consumers.polls[1] == 0.0, "a poll with final commits waiting does not wait for input"
    assert container.loop.stats.final_commit_groups == 2  # T0-T2 in round 2, T3 as the loop ended
    assert container.loop.stats.final_commits == 4


def test_every_task_of_the_group_is_checkpointed_after_its_own_snapshot_at_its_last_offset():
    container = Container(4, ending_together())
    container.loop.run()
    for n in range(4):
        assert container.first(f"snapshot T{n}") < container.first(f"checkpoint T{n}")
        final = container.checkpoints.written[f"T{n}"][-1]
        assert final.offsets[ssp(n)] == ("2" if n == 3 else "0")
    assert all(task.finished and not task.final_commit_pending for task in container.tasks)


def test_a_failing_final_commit_fails_as_its_own_task_after_the_rest_of_the_group_committed():
    container = Container(4, ending_together(), failing="T1")
    with pytest.raises(CommitFailedError, match=r"task 'T1'.*disk full under T1"):
        container.loop.run()
    assert {"T0", "T2"} <= container.checkpoints.written.keys()
    assert "T1" not in container.checkpoints.written
    assert "poll 3" not in container.events, "the loop ended with the failure"


def test_under_exactly_once_the_group_is_one_transaction():
    container = Container(4, ending_together(), exactly_once=True)
    container.loop.run()
    round_two = container.events[container.first("poll 2") : container.first("poll 3")]
    # one transaction holds the three final checkpoints (and T3's progress: a commit of one is a commit of all)
    assert [e for e in round_two if e.startswith(("checkpoint", "transaction"))] == [
        "checkpoint T0",
        "checkpoint T1",
        "checkpoint T2",
        "checkpoint T3",
        "transaction committed",
    ]
    assert not any(e.startswith("flush") for e in container.events[: container.first("poll 2")]), (
        "under exactly-once output is visible with the transaction: no flush of its own"
    )


def test_a_task_ending_alone_outside_a_run_loop_commits_at_once():
    container = Container(1, [], loop=False)
    task = container.tasks[0]
    task.process(ssp(0), [message(0, 0)])
    task.mark_end_of_stream(ssp(0))
    assert task.finished and container.checkpoints.written["T0"][-1].offsets[ssp(0)] == "0"


@pytest.fixture
def commit_thread() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2, thread_name_prefix="commit")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def test_with_a_commit_thread_the_groups_snapshots_run_on_it_each_checkpoint_after_its_own(commit_thread):
    """The stores of a task that ended take no more writes, so even write-through stores need no hold: the final
    snapshots run on the commit thread, and the final commits of the group overlap."""
    container = Container(4, ending_together(), executor=commit_thread)
    container.loop.run()
    for task in container.tasks:
        task.finish_commits()  # what the container does before it returns
    for n in range(4):
        assert container.first(f"snapshot T{n}") < container.first(f"checkpoint T{n}")
        assert container.first(f"flush T{n}") < container.first(f"snapshot T{n}")
        threads = container.storages[n].threads
        assert threads and threads[0].startswith("commit"), threads
    assert max(container.first(f"end-of-stream T{n}") for n in range(3)) < container.first("snapshot T0")


def test_with_a_commit_thread_a_failing_final_commit_fails_as_its_own_task(commit_thread):
    """The failure surfaces at T2's next commit, the loop's last, when the commit thread failed before it, and
    otherwise when the container waits for T2's commits before it returns: either way as T2's, never lost."""
    container = Container(4, ending_together(), failing="T2", executor=commit_thread)

    def run_and_wait_for_t2() -> None:
        container.loop.run()
        container.tasks[2].finish_commits()  # what the container does before it returns

    with pytest.raises(CommitFailedError, match=r"task 'T2'.*disk full under T2"):
        run_and_wait_for_t2()
    for task in container.tasks:
        if str(task.task_name) != "T2":
            task.finish_commits()  # the others' final commits are unaffected
    assert {"T0", "T1", "T3"} <= container.checkpoints.written.keys()
    assert "T2" not in container.checkpoints.written


def test_a_task_whose_end_of_stream_arrives_while_a_large_group_commits_handles_it_within_a_slice():
    """Final commits take ``FINAL_COMMIT_SLICE_S`` of a round at most, then the loop polls again: a task ending
    meanwhile does not wait for the whole group's commits before its end is handled."""
    cost = FINAL_COMMIT_SLICE_S * 0.6  # two commits fill a slice
    script = [
        {ssp(n): last(n, 0) for n in range(6)} | {ssp(6): [message(6, 0)]},  # T0-T5 end together
        {},  # ends no task: the first slice of their commits
        {ssp(6): last(6, 1)},  # T6 ends while T2-T5 still wait for theirs
    ]
    container = Container(7, script, commit_cost=cost)
    container.loop.run()
    snapshots = [index for index, event in enumerate(container.events) if event.startswith("snapshot")]
    assert len(snapshots) == 7
    assert snapshots[1] < container.first("poll 3") < snapshots[2], "two commits in the first slice, then a poll"
    assert container.first("end-of-stream T6") < snapshots[2], "T6 handled its end before the rest committed"
    assert container.consumers.polls[2:] == [0.0] * len(container.consumers.polls[2:]), "no waiting meanwhile"
    assert container.loop.stats.final_commits == 7
