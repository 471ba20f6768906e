"""TaskCommitter on its own, with fakes of the seams it takes (``runtime/seams.py``) and a clock the tests move by
hand: the order of a commit's steps, what a failure at each step leaves behind (no checkpoint ahead of the stores
and output it covers; the offsets of a failed commit are never acknowledged), the exactly-once path, and what a
commit due while the previous one is in flight does (skip and owe, block, time out)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from millstream.api.task import CheckpointListener
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.config.settings import Settings
from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.model import SystemStreamPartition, TaskName
from millstream.runtime.task_committer import CommitSettings, TaskCommitter
from millstream.runtime.transaction import ContainerTransaction
from millstream.storage.errors import CommitFailedError, CommitTimeoutError
from tests.helpers import wait_until
from tests.runtime.fakes import Clock

TASK = TaskName("Partition 0")
SSP = SystemStreamPartition("log", "in", 0)
CHANGELOG = SystemStreamPartition("log", "changelog", 0)


class StepError(Exception):
    """The failure a fake raises at the step a test names."""


class Seams:
    """Every seam a commit calls, recording each call in ``events`` and raising ``StepError`` at ``fail_at``."""

    has_backups = True
    restorable_from_v1 = True

    def __init__(
        self, fail_at: str = "", can_hold: bool = False, gate: threading.Event | None = None, gate_at: str = "upload"
    ) -> None:
        self.events: list[str] = []
        self.fail_at = fail_at
        self.failure: Exception = StepError(f"{fail_at} failed")
        """What the step ``fail_at`` raises."""
        self.can_hold = can_hold
        self.gate = gate
        """Step ``gate_at`` waits for it: a commit stuck there (an upload, a flush on an unreachable broker)."""
        self.gate_at = gate_at
        self.dirty = False
        self.written: list[Checkpoint] = []
        self.threads: dict[str, str] = {}

    def step(self, name: str) -> None:
        if self.gate is not None and name == self.gate_at:
            assert self.gate.wait(10), f"the test never released {name}"
        self.events.append(name)
        self.threads[name] = threading.current_thread().name
        if name == self.fail_at:
            raise self.failure

    # the producer pool (OutputFlusher)
    def flush(self, source: str) -> None:
        self.step("flush")

    # the checkpoint manager (CheckpointWriter)
    def write_task_checkpoints(self, task_name: TaskName, checkpoints: Sequence[Checkpoint]) -> None:
        for checkpoint in checkpoints:
            self.step(f"checkpoint-v{checkpoint.version}")
            self.written.append(checkpoint)

    # the task's stores (TaskStorage)
    def write_back(self) -> None:
        self.step("write-back")

    def hold(self) -> None:
        self.step("hold")

    def write_held(self) -> None:
        self.step("write-held")

    def release(self) -> None:
        self.step("release")

    def snapshot(self, checkpoint_id: CheckpointId) -> dict[str, dict[str, str]]:
        self.step("snapshot")
        self.dirty = False
        return {"backend": {"store": "snapshot"}}

    def upload(
        self, checkpoint_id: CheckpointId, markers: Mapping[str, Mapping[str, str]]
    ) -> dict[str, dict[str, str]]:
        self.step("upload")
        return {"backend": {"store": f"marker-{checkpoint_id}"}}

    def changelog_offsets(self, checkpoint_id: CheckpointId, markers: Any) -> dict[SystemStreamPartition, str]:
        return {CHANGELOG: "7"}

    def write_local_checkpoint(self, checkpoint_id: CheckpointId, checkpoints: list[Checkpoint]) -> None:
        self.step("local-files")

    def cleanup(self, checkpoint_id: CheckpointId, markers: Any) -> None:
        self.step("cleanup")

    def seal(self) -> None:
        self.step("seal")

    # the startpoints the task started from (PendingStartpoints)
    @property
    def pending(self) -> set[SystemStreamPartition]:
        return {SSP}

    def committed(self, updated: set[SystemStreamPartition]) -> None:
        self.step("startpoints-removed")

    # the commit points (CommitSettings.pause)
    def pause(self, point: str) -> None:
        self.step(f"pause:{point}")

    # the task's CheckpointListener
    def before_checkpoint(self) -> None:
        self.step("before-checkpoint")


class Listener(CheckpointListener):
    def __init__(self, seams: Seams) -> None:
        self.seams = seams

    def before_checkpoint(self) -> None:
        self.seams.before_checkpoint()


class Progress:
    """The task's progress as the task instance records it: what the committer cuts at each commit."""

    def __init__(self) -> None:
        self.offsets: dict[SystemStreamPartition, str] = {}
        self.updated: set[SystemStreamPartition] = set()

    def processed(self, offset: int) -> None:
        self.offsets[SSP] = str(offset)
        self.updated.add(SSP)


def committer(
    seams: Seams,
    progress: Progress,
    *,
    settings: CommitSettings | None = None,
    executor: ThreadPoolExecutor | None = None,
    clock: Clock | None = None,
    stores: bool = True,
    transaction: ContainerTransaction | None = None,
) -> TaskCommitter:
    return TaskCommitter(
        TASK,
        seams,
        seams,
        progress.offsets,
        progress.updated,
        listener=Listener(seams),
        startpoints=seams,
        storage=seams if stores else None,
        settings=settings or CommitSettings(pause=seams.pause),
        executor=executor,
        clock=clock or Clock(),
        transaction=transaction,
    )


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(1, thread_name_prefix="commit")
    yield pool
    pool.shutdown(wait=True, cancel_futures=True)


def stage_ended(executor: ThreadPoolExecutor) -> None:
    """Wait for the commit's asynchronous stage: the executor's one thread runs what was submitted in order."""
    executor.submit(lambda: None).result(timeout=10)


def v2_offsets(seams: Seams) -> list[str]:
    return [str(c.offsets[SSP]) for c in seams.written if isinstance(c, CheckpointV2)]


STEPS = [
    "write-back",
    "flush",
    "before-checkpoint",
    "pause:before-snapshot",
    "snapshot",
    "pause:after-snapshot",
    "upload",
    "pause:after-upload",
    "local-files",
    "checkpoint-v1",
    "checkpoint-v2",
    "startpoints-removed",
    "pause:after-checkpoint",
    "cleanup",
]


def test_a_commit_runs_its_steps_in_order_and_checkpoints_only_after_the_state_and_output_it_names_are_durable():
    seams, progress = Seams(), Progress()
    commits = committer(seams, progress)
    progress.processed(4)
    commits.commit()
    assert seams.events == STEPS
    v1, v2 = seams.written
    assert isinstance(v1, CheckpointV1) and v1.offsets == {SSP: "4", CHANGELOG: "7"}
    assert isinstance(v2, CheckpointV2) and dict(v2.input_offsets) == {SSP: "4"}
    assert dict(v2.state_checkpoint_markers["backend"]) == {"store": f"marker-{v2.checkpoint_id}"}
    assert commits.commits == 1 and commits.last_checkpoint == v2


def test_a_commit_with_nothing_new_flushes_but_writes_no_checkpoint_and_a_changed_store_alone_makes_one():
    seams, progress = Seams(), Progress()
    commits = committer(seams, progress)
    commits.commit()
    assert seams.events == ["write-back", "flush", "before-checkpoint", "startpoints-removed"]
    assert seams.written == []
    seams.dirty = True  # a window() wrote to a store without new input
    commits.commit()
    assert len(seams.written) == 2 and commits.commits == 1


@pytest.mark.parametrize("step", STEPS[: STEPS.index("checkpoint-v1")])
def test_a_failure_before_the_checkpoint_write_acknowledges_nothing_and_fails_the_commit(step):
    seams, progress = Seams(fail_at=step), Progress()
    commits = committer(seams, progress)
    progress.processed(4)
    with pytest.raises((StepError, CommitFailedError), match=f"{step} failed"):
        commits.commit()
    assert seams.written == [], "no checkpoint may name offsets whose output or state is not durable"
    assert seams.events == STEPS[: STEPS.index(step) + 1], "nothing runs past the step that failed"
    assert commits.commits == 0


@pytest.mark.parametrize("step", ["startpoints-removed", "pause:after-checkpoint", "cleanup"])
def test_a_failure_after_the_checkpoint_write_keeps_the_checkpoint_and_fails_the_commit(step):
    seams, progress = Seams(fail_at=step), Progress()
    commits = committer(seams, progress)
    progress.processed(4)
    with pytest.raises(StepError, match=f"{step} failed"):
        commits.commit()
    assert v2_offsets(seams) == ["4"], "the checkpoint was durable before the step that failed"
    assert seams.events == STEPS[: STEPS.index(step) + 1], "nothing runs past the step that failed"


def test_a_task_resuming_from_v2_writes_it_first_so_a_failure_between_the_writes_leaves_this_commit_to_resume():
    seams, progress = Seams(fail_at="checkpoint-v1"), Progress()
    seams.restorable_from_v1 = False  # blob-store backups resume from V2: it is written first
    commits = committer(seams, progress)
    progress.processed(4)
    with pytest.raises(StepError):
        commits.commit()
    assert [c.version for c in seams.written] == [2] and "cleanup" not in seams.events


def test_an_asynchronous_failure_fails_the_next_commit_naming_the_task_and_cause(executor):
    seams, progress = Seams(fail_at="upload"), Progress()
    commits = committer(seams, progress, executor=executor)
    progress.processed(4)
    commits.commit()  # the upload fails on the commit thread
    stage_ended(executor)
    progress.processed(5)
    with pytest.raises(CommitFailedError, match=r"task 'Partition 0': commit \d+-\d+ failed: StepError: upload failed"):
        commits.commit()
    assert seams.written == [] and seams.threads["upload"].startswith("commit")


def test_a_commit_thread_fenced_by_a_newer_attempt_raises_the_fence_itself_so_the_container_hands_over(executor):
    """Not a commit failure the policy may tolerate or a restart may retry: the container hands over to the attempt
    that fenced it (``superseded``), as it does when its own thread is fenced."""
    seams, progress = Seams(fail_at="upload"), Progress()
    fence = WriterFencedError("kafka.changelog partition 0", WriterToken("job", "0", 1, 1), "a newer epoch")
    seams.failure = fence
    settings = CommitSettings(skip_during_failures=True, max_skipped_exceptions=5)
    commits = committer(seams, progress, executor=executor, settings=settings)
    progress.processed(4)
    commits.commit()
    stage_ended(executor)
    progress.processed(5)
    with pytest.raises(WriterFencedError) as raised:
        commits.commit()
    assert raised.value is fence and commits.commit_failures_skipped == 0 and seams.written == []


def test_a_tolerated_failure_leaves_its_offsets_to_the_next_commit_even_when_the_task_is_idle(executor):
    seams, progress = Seams(fail_at="upload"), Progress()
    settings = CommitSettings(skip_during_failures=True, max_skipped_exceptions=1)
    commits = committer(seams, progress, executor=executor, settings=settings)
    progress.processed(4)
    commits.commit()
    stage_ended(executor)
    seams.fail_at = ""
    commits.commit()  # nothing new was processed, but nothing was acknowledged either
    commits.finish_commits()
    assert commits.commit_failures_skipped == 1 and v2_offsets(seams) == ["4"]


def test_the_cut_is_the_offsets_at_the_commit_not_those_processed_while_it_uploads(executor):
    gate = threading.Event()
    seams, progress = Seams(gate=gate), Progress()
    commits = committer(seams, progress, executor=executor)
    progress.processed(4)
    commits.commit()
    progress.processed(9)  # the task processes on while the upload waits
    gate.set()
    commits.finish_commits()
    assert v2_offsets(seams) == ["4", "9"]


def test_a_commit_due_within_max_delay_of_one_in_flight_is_skipped_owed_and_made_once_that_one_ended(executor):
    gate, clock = threading.Event(), Clock()
    seams, progress = Seams(gate=gate), Progress()
    commits = committer(seams, progress, executor=executor, clock=clock, settings=CommitSettings(max_delay_ms=100))
    progress.processed(4)
    commits.commit()
    progress.processed(5)
    clock.advance(99)
    commits.commit()
    commits.commit_if_owed()
    assert commits.commits_skipped == 1 and commits.commit_owed and seams.events.count("snapshot") == 1
    gate.set()

    def owed_commit_made() -> bool:
        commits.commit_if_owed()
        return v2_offsets(seams) == ["4", "5"]

    wait_until(owed_commit_made, 10, "the owed commit, once the upload ended")
    assert not commits.commit_owed and commits.commits_blocked == 0


def test_a_commit_due_past_max_delay_waits_for_the_one_in_flight_then_fails_past_the_timeout(executor):
    gate, clock = threading.Event(), Clock()
    seams, progress = Seams(gate=gate), Progress()
    settings = CommitSettings(max_delay_ms=100, timeout_ms=50)
    commits = committer(seams, progress, executor=executor, clock=clock, settings=settings)
    progress.processed(4)
    commits.commit()
    progress.processed(5)
    clock.advance(100)
    with pytest.raises(CommitTimeoutError, match=r"task 'Partition 0'.*task\.commit\.timeout\.ms=50"):
        commits.commit()
    assert commits.commits_blocked == 1 and seams.events.count("snapshot") == 1
    gate.set()
    commits.finish_commits()
    assert v2_offsets(seams) == ["4", "5"], "what the blocked commit did not cover, the last commit does"


def test_a_tolerated_timeout_skips_the_commit_and_lets_the_upload_go_on(executor):
    gate, clock = threading.Event(), Clock()
    seams, progress = Seams(gate=gate), Progress()
    settings = CommitSettings(max_delay_ms=0, timeout_ms=20, skip_during_failures=True, max_skipped_timeouts=1)
    commits = committer(seams, progress, executor=executor, clock=clock, settings=settings)
    progress.processed(4)
    commits.commit()
    progress.processed(5)
    commits.commit()
    assert commits.commits_timed_out == 1 and seams.events.count("snapshot") == 1
    gate.set()
    commits.finish_commits()
    assert v2_offsets(seams) == ["4", "5"]


def test_beside_processing_only_the_cut_runs_on_the_tasks_thread(executor):
    seams, progress = Seams(can_hold=True), Progress()
    settings = CommitSettings(pause=seams.pause, beside_processing=True)
    commits = committer(seams, progress, executor=executor, settings=settings)
    progress.processed(4)
    here = threading.current_thread().name
    commits.commit()
    commits.finish_commits()
    cut = ["flush", "before-checkpoint", "hold"]
    assert seams.events[:3] == cut and all(seams.threads[step] == here for step in cut)
    rest = ["write-held", "snapshot", "release", "upload", "checkpoint-v2", "cleanup"]
    assert all(seams.threads[step].startswith("commit") for step in rest)
    assert seams.events.index("release") < seams.events.index("upload") < seams.events.index("checkpoint-v1")
    assert v2_offsets(seams) == ["4"]


def test_beside_processing_is_the_default():
    assert CommitSettings().beside_processing
    assert CommitSettings.of(Settings({})).beside_processing


def test_beside_processing_a_changelog_write_failed_on_the_commit_thread_fails_the_next_commit_of_an_idle_task(
    executor,
):
    """The commit thread's write-back of the cut failed (a send refused by the producer, a broker gone): the task,
    idle since, reports it at its next commit and nothing is checkpointed; the caches were released."""
    seams, progress = Seams(fail_at="write-held", can_hold=True), Progress()
    commits = committer(seams, progress, executor=executor)
    progress.processed(4)
    commits.commit()
    stage_ended(executor)
    with pytest.raises(CommitFailedError, match=r"task 'Partition 0': commit \d+-\d+ failed: StepError: write-held"):
        commits.commit()
    assert seams.written == [] and seams.threads["write-held"].startswith("commit")
    assert "release" in seams.events and "snapshot" not in seams.events


def test_beside_processing_a_commit_thread_stuck_on_its_flush_is_reported_past_the_timeout_and_at_stop(executor):
    """A commit thread that never returns from the cut's write-back (a black-holed broker) does not hang the task:
    commits due within ``task.commit.max.delay.ms`` are skipped, the next one waits ``task.commit.timeout.ms`` and
    fails, and so does the final commit of a stopping container."""
    gate, clock = threading.Event(), Clock()
    seams, progress = Seams(can_hold=True, gate=gate, gate_at="write-held"), Progress()
    settings = CommitSettings(max_delay_ms=100, timeout_ms=20, pause=seams.pause)
    commits = committer(seams, progress, executor=executor, clock=clock, settings=settings)
    progress.processed(4)
    commits.commit()
    progress.processed(5)
    commits.commit()
    assert commits.commits_skipped == 1 and commits.commit_owed
    clock.advance(100)
    with pytest.raises(CommitTimeoutError, match=r"task 'Partition 0'.*task\.commit\.timeout\.ms=20"):
        commits.commit()
    with pytest.raises(CommitTimeoutError, match=r"task 'Partition 0'"):
        commits.finish_commits()
    gate.set()
    stage_ended(executor)
    assert v2_offsets(seams) == ["4"], "the stuck commit checkpoints its own cut once it ends, nothing more"


class TransactionalOutput:
    def __init__(self, seams: Seams) -> None:
        self.seams = seams

    def commit_transaction(self) -> None:
        self.seams.step("transaction-committed")


def test_under_exactly_once_the_checkpoint_goes_into_the_transaction_and_cleanup_follows_its_commit(executor):
    seams, progress = Seams(), Progress()
    transaction = ContainerTransaction(TransactionalOutput(seams))
    commits = committer(seams, progress, executor=executor, transaction=transaction)
    transaction.tasks = [commits]
    progress.processed(4)
    commits.commit()  # starts the container's commit, which commits this task inside it
    committed = seams.events.index("transaction-committed")
    assert seams.events.index("checkpoint-v2") < committed
    assert set(seams.events[committed + 1 :]) == {"startpoints-removed", "pause:after-checkpoint", "cleanup"}
    assert seams.threads["upload"] == threading.current_thread().name, "exactly-once commits synchronously"
    assert transaction.commits == 1 and v2_offsets(seams) == ["4"]


def test_under_exactly_once_a_transaction_that_fails_to_commit_runs_nothing_that_must_follow_a_checkpoint():
    seams, progress = Seams(fail_at="transaction-committed"), Progress()
    transaction = ContainerTransaction(TransactionalOutput(seams))
    commits = committer(seams, progress, transaction=transaction)
    transaction.tasks = [commits]
    progress.processed(4)
    with pytest.raises(StepError):
        commits.commit()
    assert not {"startpoints-removed", "cleanup"} & set(seams.events)
