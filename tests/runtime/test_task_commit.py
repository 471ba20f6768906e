"""TaskInstance's commit flow: the order of its steps, the asynchronous upload, and the rules for a
commit that falls due while the previous one still uploads (skip, block, time out), with a clock
the tests move by hand."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.config.settings import Settings
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition, TaskName
from millstream.runtime.process_errors import TaskProcessError
from millstream.runtime.task_committer import CommitSettings
from millstream.runtime.task_instance import ContainerContext, TaskInstance
from millstream.storage.errors import CommitFailedError, CommitTimeoutError
from tests.helpers import wait_until
from tests.runtime.fakes import Clock, DiscardingCollector

TASK = TaskName("Partition 0")
SSP = SystemStreamPartition("log", "in", 0)
CHANGELOG = SystemStreamPartition("log", "changelog", 0)


class Events(list[str]):
    pass


class FakeProducers:
    def __init__(self, events: Events) -> None:
        self.events = events

    def flush(self, source: str) -> None:
        self.events.append("flush")


class FakeCheckpoints:
    def __init__(self, events: Events, fail: Exception | None = None) -> None:
        self.events = events
        self.written: list[Checkpoint] = []
        self.fail = fail

    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        for checkpoint in checkpoints:
            self.events.append(f"checkpoint-v{checkpoint.version}")
            if self.fail is not None:
                raise self.fail
            self.written.append(checkpoint)


class FakeStorage:
    """Records the commit steps; ``gate`` holds uploads back until a test releases it."""

    has_backups = True
    restorable_from_v1 = True
    can_hold = False

    def __init__(self, events: Events, gate: threading.Event | None = None, fail: Exception | None = None) -> None:
        self.events = events
        self.gate = gate
        self.fail = fail
        self.dirty = False
        self.upload_threads: list[str] = []
        self.uploading = threading.Event()

    def write_back(self) -> None:
        self.events.append("write-back")

    def hold(self) -> None:
        raise AssertionError("can_hold is False: a commit never holds")

    def write_held(self) -> None:
        raise AssertionError("can_hold is False")

    def release(self) -> None:
        raise AssertionError("can_hold is False")

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, dict[str, str]]:
        self.events.append("snapshot")
        self.dirty = False
        return {"backend": {"store": "snapshot"}}

    def upload(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]
    ) -> dict[str, dict[str, str]]:
        self.events.append("upload")
        self.upload_threads.append(threading.current_thread().name)
        self.uploading.set()
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        return {"backend": {"store": f"marker-{checkpoint_id}"}}

    def changelog_offsets(self, checkpoint_id: CheckpointId, markers: Any) -> dict[SystemStreamPartition, str]:
        return {CHANGELOG: f"{checkpoint_id}:7"}

    def write_local_checkpoint(self, checkpoint_id: CheckpointId, checkpoints: list[Checkpoint]) -> None:
        self.events.append("local-files")

    def cleanup(self, checkpoint_id: CheckpointId, markers: Any) -> None:
        self.events.append("cleanup")

    def seal(self) -> None:
        self.events.append("seal")


class FakeStartpoints:
    def __init__(self, events: Events) -> None:
        self.events = events
        self.pending = {SSP}

    def committed(self, updated: set[SystemStreamPartition]) -> None:
        self.events.append("startpoints-removed")
        self.pending = set()


class Recorder:
    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        pass


def envelope(offset: int) -> IncomingMessageEnvelope:
    return IncomingMessageEnvelope(SSP, str(offset), b"k", b"v")


def make_task(
    events: Events,
    storage: FakeStorage | None,
    *,
    clock: Clock | None = None,
    executor: Any = None,
    settings: CommitSettings | None = None,
    checkpoints: FakeCheckpoints | None = None,
    startpoints: FakeStartpoints | None = None,
    task: Any = None,
) -> tuple[TaskInstance, FakeCheckpoints]:
    """A TaskInstance of ``task`` (a ``Recorder`` by default) over ``SSP``, with fakes for the rest."""
    checkpoints = checkpoints or FakeCheckpoints(events)
    context = ContainerContext(TASK, Settings({}), frozenset({SSP}), "0")
    instance = TaskInstance(
        TASK,
        task if task is not None else Recorder(),
        frozenset({SSP}),
        context,
        FakeProducers(events),
        DiscardingCollector(),
        checkpoints,
        {},
        {},
        startpoints,
        storage=storage,
        commit_settings=settings or CommitSettings(),
        commit_executor=executor,
        clock=clock or Clock(),
    )
    return instance, checkpoints


@pytest.fixture
def executor():
    pool = ThreadPoolExecutor(2, thread_name_prefix="commit")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def test_commit_writes_back_caches_then_flushes_then_snapshots_then_uploads_then_writes_checkpoints_then_cleans_up(
    executor,
):
    events = Events()
    startpoints = FakeStartpoints(events)
    task, checkpoints = make_task(events, FakeStorage(events), executor=executor, startpoints=startpoints)
    task.process(SSP, [envelope(0), envelope(1)])
    task.commit()
    task.finish_commits()
    assert events == [
        "write-back",
        "flush",
        "snapshot",
        "upload",
        "local-files",
        "checkpoint-v1",
        "checkpoint-v2",
        "startpoints-removed",
        "cleanup",
        "write-back",
        "flush",
        "seal",  # the container's stop: the last commit's local checkpoints that were not due
    ]
    v1, v2 = checkpoints.written
    assert isinstance(v1, CheckpointV1) and isinstance(v2, CheckpointV2)
    assert v1.offsets == {SSP: "1", CHANGELOG: f"{v2.checkpoint_id}:7"}
    assert dict(v2.input_offsets) == {SSP: "1"}
    assert dict(v2.state_checkpoint_markers["backend"]) == {"store": f"marker-{v2.checkpoint_id}"}


def test_upload_runs_on_a_commit_thread_while_the_task_keeps_processing(executor):
    events, gate = Events(), threading.Event()
    storage = FakeStorage(events, gate)
    task, checkpoints = make_task(events, storage, executor=executor)
    task.process(SSP, [envelope(0)])
    task.commit()
    assert storage.uploading.wait(5)
    task.process(SSP, [envelope(1), envelope(2)])  # the upload is still blocked
    assert task.last_processed[SSP] == "2" and checkpoints.written == []
    gate.set()
    task.finish_commits()
    assert storage.upload_threads[0].startswith("commit")
    assert [c.offsets[SSP] for c in checkpoints.written if isinstance(c, CheckpointV2)] == ["0", "2"]


def test_commit_due_during_an_upload_is_skipped_while_within_max_delay(executor):
    events, gate, clock = Events(), threading.Event(), Clock()
    task, _ = make_task(
        events, FakeStorage(events, gate), clock=clock, executor=executor, settings=CommitSettings(max_delay_ms=100)
    )
    task.process(SSP, [envelope(0)])
    task.commit()
    task.process(SSP, [envelope(1)])
    clock.advance(99)
    task.commit()
    assert task.committer.commits_skipped == 1 and task.committer.commits_blocked == 0
    assert events.count("snapshot") == 1
    gate.set()
    task.finish_commits()
    assert events.count("snapshot") == 2  # the skipped work is committed before the container returns


def test_a_commit_skipped_during_an_upload_is_owed_and_made_by_commit_if_owed_once_the_upload_ended(executor):
    events, gate, clock = Events(), threading.Event(), Clock()
    task, checkpoints = make_task(
        events, FakeStorage(events, gate), clock=clock, executor=executor, settings=CommitSettings(max_delay_ms=100)
    )
    task.process(SSP, [envelope(0)])
    task.commit()
    task.process(SSP, [envelope(1)])
    task.commit()
    assert task.commit_owed and task.committer.commits_skipped == 1
    task.commit_if_owed()
    assert events.count("snapshot") == 1, "not while the upload runs"
    gate.set()

    def owed_commit_made() -> bool:
        task.commit_if_owed()  # what the run loop calls between batches
        return events.count("snapshot") == 2

    wait_until(owed_commit_made, 10, "the owed commit, once the upload ended")
    assert not task.commit_owed
    task.commit_if_owed()
    assert events.count("snapshot") == 2, "owed once, made once"
    task.finish_commits()
    assert [c.offsets[SSP] for c in checkpoints.written if isinstance(c, CheckpointV2)] == ["0", "1"]


def test_commit_due_beyond_max_delay_blocks_processing_until_the_upload_ends(executor):
    events, gate, clock = Events(), threading.Event(), Clock()
    task, checkpoints = make_task(
        events, FakeStorage(events, gate), clock=clock, executor=executor, settings=CommitSettings(max_delay_ms=100)
    )
    task.process(SSP, [envelope(0)])
    task.commit()
    task.process(SSP, [envelope(1)])
    clock.advance(100)
    threading.Timer(0.2, gate.set).start()
    task.commit()  # returns only once the first upload ended, then starts the second commit
    assert task.committer.commits_blocked == 1 and task.committer.commits_skipped == 0
    assert events.count("snapshot") == 2
    assert events.index("cleanup") < len(events) - 1 - events[::-1].index("snapshot")
    task.finish_commits()
    assert [c.offsets[SSP] for c in checkpoints.written if isinstance(c, CheckpointV2)] == ["0", "1"]


def test_blocked_commit_fails_after_the_commit_timeout_naming_the_task(executor):
    events, gate, clock = Events(), threading.Event(), Clock()
    settings = CommitSettings(max_delay_ms=0, timeout_ms=50)
    task, _ = make_task(events, FakeStorage(events, gate), clock=clock, executor=executor, settings=settings)
    task.process(SSP, [envelope(0)])
    task.commit()
    task.process(SSP, [envelope(1)])
    with pytest.raises(CommitTimeoutError, match=r"task 'Partition 0'.*task\.commit\.timeout\.ms=50"):
        task.commit()
    gate.set()


def test_a_failed_upload_fails_the_next_commit_with_its_cause(executor):
    events = Events()
    cause = OSError("disk on fire")
    storage = FakeStorage(events, fail=cause)
    task, checkpoints = make_task(events, storage, executor=executor)
    task.process(SSP, [envelope(0)])
    task.commit()
    executor.shutdown(wait=True)
    task.process(SSP, [envelope(1)])
    with pytest.raises(
        CommitFailedError, match=r"task 'Partition 0': commit \d+-\d+ failed: OSError: disk on fire"
    ) as raised:
        task.commit()
    assert raised.value.__cause__ is cause
    assert checkpoints.written == [] and "cleanup" not in events


def test_a_failed_checkpoint_write_skips_the_cleanup_and_fails_the_next_commit(executor):
    events = Events()
    checkpoints = FakeCheckpoints(events, fail=RuntimeError("fenced"))
    task, _ = make_task(events, FakeStorage(events), executor=executor, checkpoints=checkpoints)
    task.process(SSP, [envelope(0)])
    task.commit()
    with pytest.raises(CommitFailedError, match="fenced"):
        task.finish_commits()
    assert "cleanup" not in events


def test_nothing_is_committed_when_neither_offsets_nor_stores_changed(executor):
    events = Events()
    storage = FakeStorage(events)
    task, checkpoints = make_task(events, storage, executor=executor)
    task.commit()
    assert events == ["write-back", "flush"] and checkpoints.written == []
    storage.dirty = True  # e.g. a window() wrote to a store without new input
    task.commit()
    task.finish_commits()
    assert events.count("snapshot") == 1 and len(checkpoints.written) == 2


@pytest.mark.parametrize(("versions", "expected"), [((1,), [1]), ((2,), [2]), ((2, 1), [2, 1])])
def test_write_versions_choose_which_checkpoints_are_written_and_in_what_order(executor, versions, expected):
    events = Events()
    task, checkpoints = make_task(
        events, FakeStorage(events), executor=executor, settings=CommitSettings(write_versions=versions)
    )
    task.process(SSP, [envelope(0)])
    task.commit()
    task.finish_commits()
    assert [c.version for c in checkpoints.written] == expected


def test_a_task_that_resumes_from_v2_writes_v2_first_so_a_crash_between_the_writes_keeps_this_commit(executor):
    events = Events()
    storage = FakeStorage(events)
    storage.restorable_from_v1 = False  # blob-store backups: only a V2 checkpoint restores them
    task, checkpoints = make_task(events, storage, executor=executor)
    task.process(SSP, [envelope(0)])
    task.commit()
    task.finish_commits()
    assert [c.version for c in checkpoints.written] == [2, 1]


def test_a_task_without_stores_checkpoints_synchronously():
    events = Events()
    task, checkpoints = make_task(events, None)
    task.process(SSP, [envelope(3)])
    task.commit()
    assert events == ["flush", "checkpoint-v1", "checkpoint-v2"]
    assert checkpoints.written[0].offsets == {SSP: "3"}
    assert checkpoints.written[1].offsets == {SSP: "3"}
    v2 = checkpoints.written[1]
    assert isinstance(v2, CheckpointV2) and dict(v2.state_checkpoint_markers) == {}


def test_commit_pauses_are_reached_at_their_points_in_order(executor):
    events = Events()
    settings = CommitSettings(pause=lambda point: events.append(f"pause:{point}"))
    task, _ = make_task(events, FakeStorage(events), executor=executor, settings=settings)
    task.process(SSP, [envelope(0)])
    task.commit()
    task.finish_commits()
    assert [e for e in events if e.startswith("pause") or e in ("upload", "checkpoint-v2", "cleanup")] == [
        "pause:before-snapshot",
        "pause:after-snapshot",
        "upload",
        "pause:after-upload",
        "checkpoint-v2",
        "pause:after-checkpoint",
        "cleanup",
    ]


class FailingAt:
    """Raises at one offset; asks for a commit at another."""

    def __init__(self, fail: str = "", commit: str = "") -> None:
        self.fail = fail
        self.commit = commit

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        if envelope.offset == self.fail:
            raise ValueError(f"cannot handle {envelope.offset}")
        if envelope.offset == self.commit:
            coordinator.commit()


def test_a_message_the_policy_fails_on_is_not_covered_by_the_batchs_offset():
    events = Events()
    task, checkpoints = make_task(events, None)
    task.task = FailingAt(fail="2")
    with pytest.raises(TaskProcessError, match="offset 2"):
        task.process(SSP, [envelope(0), envelope(1), envelope(2), envelope(3)])
    assert task.last_processed[SSP] == "1"
    task.commit()
    assert [c.offsets[SSP] for c in checkpoints.written if isinstance(c, CheckpointV2)] == ["1"]


def test_a_commit_the_task_requests_mid_batch_covers_the_message_that_requested_it():
    events = Events()
    task, checkpoints = make_task(events, None)
    task.task = FailingAt(commit="1")
    assert task.process(SSP, [envelope(0), envelope(1), envelope(2)]) == 3
    assert [c.offsets[SSP] for c in checkpoints.written if isinstance(c, CheckpointV2)] == ["1"]
    assert task.last_processed[SSP] == "2"
