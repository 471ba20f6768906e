"""With ``task.commit.snapshot.beside.processing.enabled``, a commit of a task whose stores all have an object cache,
or that has none, pauses processing only for its cut:
the write-back, the producers' flush, the stores' snapshot and the checkpoint run on the commit thread while the
task processes on, and the checkpoint still names exactly the state of the cut's offsets. A store without a cache
keeps the snapshot on the task's thread. The commit is held at its ``before-snapshot`` point by a hook the test
releases."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from millstream.api.task import CheckpointListener
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointV2
from millstream.config.settings import Settings
from millstream.model import IncomingMessageEnvelope, TaskName
from millstream.runtime.task_committer import CommitSettings
from millstream.runtime.task_instance import ContainerContext, TaskInstance
from tests.helpers import wait_until
from tests.runtime.fakes import DiscardingCollector
from tests.storage.harness import INPUT, TASK, StateHarness, state_config


class PutEach:
    """Puts each message's key → message into ``counts``."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        self.store.put(envelope.key, envelope.message)


class Checkpoints:
    def __init__(self) -> None:
        self.written: list[Checkpoint] = []

    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        self.written.extend(checkpoints)


class HeldAt:
    """A commit hook that stops the commit at ``point`` until the test calls ``go``; records the threads."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.reached = threading.Event()
        self.released = threading.Event()
        self.threads: list[str] = []

    def __call__(self, point: str) -> None:
        if point != self.point:
            return
        self.threads.append(threading.current_thread().name)
        self.reached.set()
        assert self.released.wait(30), "the test never released the commit"

    def go(self) -> None:
        self.released.set()


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(2, thread_name_prefix="commit")
    yield pool
    pool.shutdown(wait=True)


def envelopes(first: int, pairs: list[tuple[str, int]]) -> list[IncomingMessageEnvelope]:
    return [IncomingMessageEnvelope(INPUT, str(first + i), key, value) for i, (key, value) in enumerate(pairs)]


def instance(opened: Any, hook: HeldAt, executor: ThreadPoolExecutor, checkpoints: Checkpoints) -> TaskInstance:
    stores = opened.storage.stores
    return TaskInstance(
        TASK,
        PutEach(stores["counts"]),
        frozenset({INPUT}),
        ContainerContext(TASK, opened.container.config, frozenset({INPUT}), "0", stores),
        opened.producers,
        DiscardingCollector(),
        checkpoints,
        {},
        {},
        storage=opened.storage,
        commit_settings=CommitSettings(pause=hook, beside_processing=True),
        commit_executor=executor,
    )


@pytest.mark.parametrize("backend", ["changelog", "blobstore"])
def test_processing_goes_on_while_a_commit_snapshots_and_the_checkpoint_names_the_state_of_its_cut(
    tmp_path: Path, executor: ThreadPoolExecutor, backend: str
) -> None:
    harness = StateHarness(state_config(tmp_path, backend))
    opened = harness.open()
    hook, checkpoints = HeldAt("before-snapshot"), Checkpoints()
    task = instance(opened, hook, executor, checkpoints)
    task.process(INPUT, envelopes(0, [("a", 1), ("b", 1), ("a", 2)]))

    task.commit()  # returns with its snapshot still to make: the hook holds the commit thread
    wait_until(hook.reached.is_set, 10, "the commit never reached its snapshot")
    assert hook.threads != [threading.current_thread().name]
    task.process(INPUT, envelopes(3, [("a", 3), ("c", 1)]))  # processing goes on meanwhile
    store, engine = opened.storage.stores["counts"], opened.storage.engines["counts"]
    assert (store.get("a"), store.get("c")) == (3, 1)  # the task reads its own writes
    assert engine.get(b"c") is None  # but they wait in the cache: the snapshot sees the cut's state only
    hook.go()
    wait_until(lambda: task.committer.commits == 1, 10, "the commit never completed")

    v2 = next(c for c in checkpoints.written if isinstance(c, CheckpointV2))
    assert v2.offsets == {INPUT: "2"}
    opened.storage.write_back()  # released: the writes made during the snapshot reach the engine again
    assert engine.get(b"c") is not None
    opened.close()

    harness.checkpoint = v2  # a restart from the first checkpoint restores exactly the state of its cut
    restored = harness.open()
    assert {key: restored.store.get(key) for key in "abc"} == {"a": 2, "b": 1, "c": None}
    restored.close()


def test_a_store_without_an_object_cache_snapshots_on_the_tasks_thread(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    """It writes through to the engine and the changelog, so nothing could hold the task's writes meanwhile."""
    harness = StateHarness(state_config(tmp_path, "changelog", stores__counts__object__cache__size=0))
    opened = harness.open()
    hook, checkpoints = HeldAt("before-snapshot"), Checkpoints()
    hook.go()
    task = instance(opened, hook, executor, checkpoints)
    task.process(INPUT, envelopes(0, [("a", 1)]))
    task.commit()
    assert hook.threads == [threading.current_thread().name]
    task.finish_commits()
    assert task.committer.commits == 1
    opened.close()


class Ignore:
    def process(self, envelope: IncomingMessageEnvelope, collector: Any, coordinator: Any) -> None:
        pass


class Flushes:
    def __init__(self) -> None:
        self.threads: list[str] = []

    def flush(self, source: str) -> None:
        self.threads.append(threading.current_thread().name)


def test_a_task_without_stores_flushes_and_checkpoints_on_the_commit_thread_while_it_processes_on(
    executor: ThreadPoolExecutor,
) -> None:
    hook, checkpoints, producers = HeldAt("before-snapshot"), Checkpoints(), Flushes()
    task = TaskInstance(
        TASK,
        Ignore(),
        frozenset({INPUT}),
        ContainerContext(TASK, Settings({}), frozenset({INPUT}), "0"),
        producers,
        DiscardingCollector(),
        checkpoints,
        {},
        {},
        commit_settings=CommitSettings(pause=hook, beside_processing=True),
        commit_executor=executor,
    )
    task.process(INPUT, envelopes(0, [("a", 1), ("b", 1)]))
    task.commit()
    wait_until(hook.reached.is_set, 10, "the commit never reached its checkpoint's flush")
    assert producers.threads and threading.current_thread().name not in producers.threads
    task.process(INPUT, envelopes(2, [("c", 1)]))  # processing goes on meanwhile
    assert checkpoints.written == []
    hook.go()
    wait_until(lambda: task.committer.commits == 1, 10, "the commit never completed")
    assert [c.offsets for c in checkpoints.written] == [{INPUT: "1"}, {INPUT: "1"}]  # the cut's offsets


class Listening(Ignore, CheckpointListener):
    """Records, at ``before_checkpoint``, the flushes made so far and the thread it runs on."""

    def __init__(self, producers: Flushes) -> None:
        self.producers = producers
        self.calls: list[tuple[int, str]] = []

    def before_checkpoint(self) -> None:
        self.calls.append((len(self.producers.threads), threading.current_thread().name))


def test_a_checkpoint_listener_is_called_on_the_tasks_thread_once_its_output_was_flushed(
    executor: ThreadPoolExecutor,
) -> None:
    """Its contract (the high-level engine sends aggregated control messages only after earlier output is
    durable): the flush before it stays on the task's thread; the checkpoint's own flush follows on the commit
    thread."""
    producers = Flushes()
    listener = Listening(producers)
    task = TaskInstance(
        TASK,
        listener,
        frozenset({INPUT}),
        ContainerContext(TASK, Settings({}), frozenset({INPUT}), "0"),
        producers,
        DiscardingCollector(),
        Checkpoints(),
        {},
        {},
        commit_settings=CommitSettings(beside_processing=True),
        commit_executor=executor,
    )
    task.process(INPUT, envelopes(0, [("a", 1)]))
    task.commit()
    task.finish_commits()
    here = threading.current_thread().name
    assert listener.calls[0] == (1, here) and producers.threads[0] == here
    assert task.committer.commits == 1 and producers.threads[1] != here


def test_without_the_setting_the_snapshot_stays_on_the_tasks_thread(
    tmp_path: Path, executor: ThreadPoolExecutor
) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog"))
    opened = harness.open()
    hook = HeldAt("before-snapshot")
    hook.go()
    task = instance(opened, hook, executor, Checkpoints())
    task.committer.settings = CommitSettings(pause=hook, beside_processing=False)
    task.process(INPUT, envelopes(0, [("a", 1)]))
    task.commit()
    assert hook.threads == [threading.current_thread().name]
    task.finish_commits()
    opened.close()
