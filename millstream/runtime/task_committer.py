"""A task's commits: the one place that decides when a task commits and makes each commit durable in order.

Commit order is what makes output at-least-once and state transactional: the stores' object caches
write back what they hold dirty, producers are flushed (output and changelogs), the task's
``before_checkpoint`` runs (what it writes to a store is written back and flushed to the changelog too,
so it is part of this commit), the stores are snapshotted (the checkpoint directories and the backends'
markers), their snapshots uploaded (asynchronously, on a commit thread, while the task keeps processing), and
only then are the checkpoints written — input offsets with the markers of exactly the state those offsets
produced, handed to the container's group commit, which writes them in one batch with those of the other tasks
committing meanwhile (``checkpoint/group_commit.py``) — and what they no longer need cleaned up. A crash anywhere
re-processes from the last durable checkpoint, with the stores restored to the state it names.

With ``task.commit.snapshot.beside.processing.enabled`` (the default), only the commit's cut pauses processing when
the task has no stores, or every store of the task has an object cache (the default) and backups:
``before_checkpoint``, the offsets, and the caches' dirty entries taken (``TaskStorage.hold``). The write-back of
those entries, the producers' flush, the RocksDB flush and checkpoint directory and the backends' snapshot then run
on the commit thread with the upload, while the task processes on; its writes stay in the caches until the snapshot
is made, so the snapshot still holds exactly the state of the cut's offsets. Without an object cache on every store
(a store that writes through, such as the high-level engine's operator store), the flush and snapshot run on the
task's thread, exclusive with processing. A commit thread's failure (a changelog write refused, a flush past the
system's outage deadline) fails the task's next commit, whether or not the task processed anything since, and a
stopping container's final one; a commit thread that does not return is reported under the rules below, as an
upload is. The container's changelog producer is then used from several threads; the producer pool serializes its
calls (``systems/producers.py``).

One commit is in flight per task. A commit due while the previous one still uploads is skipped while
that one started less than ``task.commit.max.delay.ms`` ago; past that, processing blocks until it
ends, and fails after ``task.commit.timeout.ms``. A skipped commit is owed: the run loop makes it as soon
as the upload ended (``commit_if_owed``), not at the next ``task.commit.ms``, because what the task asked
to flush (end-of-stream on intermediate streams, a finished task's last output) may be what the job waits
for to end. A failed asynchronous stage fails the next commit
(and so the container) with its cause. A task without stores has only offsets in its cut: the flush and the
checkpoint run on the commit thread (synchronously when it has no commit executor, as in tests).

A task's final commit (``commit(final=True)``, made by the run loop once the task ended) runs its snapshot on the
commit thread whatever its stores: the task writes nothing more, so nothing needs holding, and the final commits of
tasks ending together overlap (RocksDB's flush and checkpoint release the GIL) instead of queueing on the run loop.

Under exactly-once (``transaction``) commits are synchronous and container-wide: a task's commit appends
its checkpoints to the container's open Kafka transaction, and what must follow a durable checkpoint
(startpoints, purges, cleanup) waits until that transaction committed (``runtime/transaction.py``).

The committer reads the task's progress (the offsets it processed, the partitions that moved) from the
mapping and set the task instance updates on its hot path; it only copies them, at a commit's cut, on the task's
thread, so processing pays nothing for it. Time comes from an injected clock, the commit thread from an injected
executor, so the rules above can be tested with a clock moved by hand and the steps with fakes of the seams
(``runtime/seams.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from concurrent.futures import wait as wait_for
from dataclasses import dataclass, field

from millstream.api.task import CheckpointListener
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV1, CheckpointV2
from millstream.checkpoint.purge import CommittedMessagePurger
from millstream.config.settings import Settings
from millstream.contracts.systems import FencedError
from millstream.model import SystemStreamPartition, TaskName
from millstream.runtime.seams import CheckpointWriter, OutputFlusher, PendingStartpoints, TaskMeter, TaskStorage
from millstream.runtime.transaction import ContainerTransaction
from millstream.storage.errors import CommitFailedError, CommitTimeoutError

log = logging.getLogger(__name__)

Offsets = dict[SystemStreamPartition, str]
Markers = dict[str, dict[str, str]]


@dataclass(frozen=True)
class CommitSettings:
    """The commit rules of ``task.*`` (see the module docstring)."""

    max_delay_ms: int = 60_000
    timeout_ms: int = 1_800_000
    write_versions: tuple[int, ...] = (1, 2)
    pause: Callable[[str], None] = field(default=lambda point: None, compare=False)
    """Testing hook at the commit points (``storage.faults``)."""
    skip_during_failures: bool = False
    max_skipped_exceptions: int = 5
    max_skipped_timeouts: int = 2
    beside_processing: bool = True
    """``task.commit.snapshot.beside.processing.enabled``: the commit's flush, snapshot and checkpoint on the
    commit thread, only the cut on the task's thread."""

    @classmethod
    def of(cls, config: Settings, pause: Callable[[str], None] | None = None) -> CommitSettings:
        task = config.task
        return cls(
            task.commit_max_delay_ms,
            task.commit_timeout_ms,
            tuple(task.checkpoint_write_versions),
            pause or (lambda point: None),
            task.commit_skip_during_failures,
            task.commit_skip_exception_max_limit,
            task.commit_skip_timeout_max_limit,
            task.commit_snapshot_beside_processing,
        )


class TaskCommitter:
    """The commit state machine of one task: what a commit does, in which order, on which thread, and what
    a commit due while the previous one is in flight or after one failed does instead.

    Its public calls (``commit``, ``commit_if_owed``, ``finish_commits``) run on the task's thread; the
    asynchronous stage of a commit runs on ``executor`` and hands its failure back to the next call.
    """

    def __init__(
        self,
        task_name: TaskName,
        producers: OutputFlusher,
        checkpoint_manager: CheckpointWriter,
        offsets: Mapping[SystemStreamPartition, str],
        updated: set[SystemStreamPartition],
        *,
        listener: CheckpointListener | None = None,
        startpoints: PendingStartpoints | None = None,
        storage: TaskStorage | None = None,
        settings: CommitSettings | None = None,
        executor: Executor | None = None,
        purger: CommittedMessagePurger | None = None,
        clock: Callable[[], float] = time.monotonic,
        meters: TaskMeter | None = None,
        transaction: ContainerTransaction | None = None,
    ) -> None:
        """``offsets`` and ``updated`` are the task's progress, updated by the task instance as it processes
        (read here only at a commit's cut): the last offset processed per partition, and the partitions that
        processed a message or ended since start. ``listener``: the task, when it wants ``before_checkpoint``.
        ``transaction``: exactly-once, the container's commit of all its tasks in one transaction (a commit of
        this task is one of all; what must follow a durable checkpoint waits for the transaction to commit); its
        commits run on the task's thread whatever ``executor`` is, since the checkpoint must be in the transaction
        before it commits."""
        self.task_name = task_name
        self.producers = producers
        self.checkpoint_manager = checkpoint_manager
        self.offsets = offsets
        self.updated = updated
        self.listener = listener
        self.startpoints = startpoints
        self.storage = storage
        self.settings = settings or CommitSettings()
        self.executor = executor
        self.purger = purger
        self.transaction = transaction
        self.meters = meters
        self._clock = clock
        self._resumes_from_v2 = storage is not None and not storage.restorable_from_v1
        """The task resumes from its last V2 checkpoint (see ``_write_order``)."""
        self._snapshotted = dict(offsets)
        """The offsets of the last commit's snapshot (its checkpoint may still be on its way)."""
        self._in_flight: Future[None] | None = None
        self._in_flight_id: CheckpointId | None = None
        self._commit_started = 0.0
        self._commit_failure: tuple[CheckpointId, BaseException] | None = None
        self.commits = 0
        self.commits_skipped = 0
        self.commit_owed = False
        """A commit was skipped while one uploaded: ``commit_if_owed`` makes it once the upload ended."""
        self.commits_blocked = 0
        self.commits_timed_out = 0
        """Blocked commits that gave up waiting and were skipped (``task.commit.skip.commit.*``)."""
        self.commit_failures_skipped = 0
        """Failed commits tolerated (``task.commit.skip.commit.*``); the next commit covers their offsets."""
        self.last_checkpoint: Checkpoint | None = None

    def commit(self, final: bool = False) -> None:
        """Flush the task's output, snapshot its stores, then (asynchronously when it has backups)
        upload them, checkpoint the offsets it processed and clean up; only when the offsets moved
        or a store changed. Then drop the startpoints this commit made obsolete. Under exactly-once, the whole
        container commits in one transaction (``ContainerTransaction``). An ``AsyncStreamTask``'s messages in
        flight go on: the offsets and output (held until release) cover the completed prefix.

        ``final``: the task ended and writes nothing more, so even stores that write through need no hold: after
        the write-back, the flush and ``before_checkpoint`` on this thread, the snapshot (RocksDB's flush and
        checkpoint, which release the GIL) runs on the commit thread with the rest (``_final_beside``), and the
        final commits of tasks ending together overlap instead of queueing on the run loop's thread."""
        transaction = self.transaction
        if transaction is not None and not transaction.committing:
            transaction.commit()
            return
        self._raise_commit_failure()
        if not self._previous_commit_ended():
            return
        self.commit_owed = False
        started = self._clock()
        if self._snapshots_beside_processing():
            self._commit_beside_processing(started)
            return
        self._flush_on_task_thread()
        if not self._cut_changed():
            self._startpoints_applied(self.updated)
            return
        checkpoint_id = CheckpointId.create()
        offsets = dict(self.offsets)
        updated = set(self.updated)
        if final and self.executor is not None and self.transaction is None:
            self._final_beside(started, checkpoint_id, offsets, updated)
            return
        phase = self._timed("flush", started)
        self.settings.pause("before-snapshot")
        storage = self.storage
        try:
            markers = storage.snapshot(checkpoint_id) if storage is not None else {}
        except Exception as error:  # under the commit-failure policy, as a failed upload or checkpoint write
            self._commit_failure = (checkpoint_id, error)
            self._raise_commit_failure()
            return
        self._timed("snapshot", phase)
        self._snapshotted = offsets
        self._commit_started = started
        self.settings.pause("after-snapshot")
        if storage is not None and storage.has_backups and self.executor is not None and self.transaction is None:
            self._in_flight_id = checkpoint_id
            self._in_flight = self.executor.submit(
                self._complete_commit_recording_failure, checkpoint_id, offsets, markers, updated
            )
        else:
            self._complete_commit(checkpoint_id, offsets, markers, updated)

    def _previous_commit_ended(self) -> bool:
        """Whether this commit may start: no commit is in flight, or the one in flight ended. While it started less
        than ``task.commit.max.delay.ms`` ago this commit is skipped (and owed); past that, it waits for it."""
        in_flight = self._in_flight
        if in_flight is None or in_flight.done():
            return True
        delay_ms = (self._clock() - self._commit_started) * 1000
        if delay_ms < self.settings.max_delay_ms:
            self.commits_skipped += 1
            self.commit_owed = True
            log.debug("%s: commit skipped, commit %s still uploading", self.task_name, self._in_flight_id)
            return False
        self.commits_blocked += 1
        log.warning(
            "%s: commit %s still uploading after %.0f ms (task.commit.max.delay.ms=%d): processing waits for it",
            self.task_name, self._in_flight_id, delay_ms, self.settings.max_delay_ms,
        )  # fmt: skip
        if not self._wait_for_commit(tolerate_timeout=True):
            return False  # tolerated: the upload goes on, and the next commit waits for it again
        self._raise_commit_failure()
        return True

    def _flush_on_task_thread(self) -> None:
        """The stores' cached writes and the task's output made durable before the snapshot, with what the task's
        ``before_checkpoint`` writes."""
        storage = self.storage
        if storage is not None:
            storage.write_back()  # the stores' cached writes join the changelog before the flush
        self.producers.flush(self.task_name)
        if self.listener is not None:
            self.listener.before_checkpoint()
            if storage is not None and storage.dirty:
                storage.write_back()
                self.producers.flush(self.task_name)  # the listener's store writes reach their changelog

    def _cut_changed(self) -> bool:
        """Whether there is anything to checkpoint: offsets moved since the last snapshot, or a store changed."""
        storage = self.storage
        return self.offsets != self._snapshotted or (storage is not None and storage.dirty)

    def _startpoints_applied(self, updated: set[SystemStreamPartition]) -> None:
        if self.startpoints is not None and self.startpoints.pending:
            self.startpoints.committed(updated)

    def _snapshots_beside_processing(self) -> bool:
        """Whether this commit's flush, snapshot and checkpoint may run on the commit thread: it is enabled
        (``task.commit.snapshot.beside.processing.enabled``), the container gave the task one, no container
        transaction needs the commit on this thread, and the task has no stores or
        every store can hold the task's writes meanwhile (an object cache) and has backups."""
        storage = self.storage
        if not self.settings.beside_processing or self.executor is None or self.transaction is not None:
            return False
        return storage is None or (storage.has_backups and storage.can_hold)

    def _commit_beside_processing(self, started: float) -> None:
        """The commit's cut on the task's thread, everything else on the commit thread (``_snapshot_and_complete``).

        The cut is ``before_checkpoint`` (after a flush of the task's output on this thread, as its contract says:
        the high-level engine's aggregated control messages rely on it), the input offsets, and the stores' cached
        writes so far, taken by ``storage.hold``; later writes stay in the stores' caches until the snapshot is
        made, so it names exactly the state the offsets produced while the task goes on processing. Output sent
        before the cut is flushed before the snapshot and the checkpoint (the flush may cover later output too,
        which is harmless)."""
        storage = self.storage
        if self.listener is not None:
            self.producers.flush(self.task_name)  # its contract: called once the task's output so far is durable
            self.listener.before_checkpoint()
        if not self._cut_changed():
            self.producers.flush(self.task_name)
            self._startpoints_applied(self.updated)
            return
        checkpoint_id = CheckpointId.create()
        offsets = dict(self.offsets)
        if storage is not None:
            storage.hold()
        self._submit_snapshot(started, checkpoint_id, offsets, set(self.updated))

    def _final_beside(
        self, started: float, checkpoint_id: CheckpointId, offsets: Offsets, updated: set[SystemStreamPartition]
    ) -> None:
        """A final commit's snapshot, upload and checkpoint on the commit thread (see ``commit``). The stores were
        written back and the output flushed on the task's thread; ``_snapshot_and_complete`` flushes again before
        the snapshot (nothing is held: ``write_held`` and ``release`` do nothing), so the checkpoint still follows
        the task's own durable output and changelog."""
        self._timed("flush", started)
        self._submit_snapshot(started, checkpoint_id, offsets, updated)

    def _submit_snapshot(
        self, started: float, checkpoint_id: CheckpointId, offsets: Offsets, updated: set[SystemStreamPartition]
    ) -> None:
        """The cut at ``offsets`` is taken: its snapshot, upload and checkpoint go to the commit thread
        (``_snapshot_and_complete``), as the commit in flight."""
        executor = self.executor
        assert executor is not None
        self._snapshotted = offsets
        self._commit_started = started
        self._in_flight_id = checkpoint_id
        self._in_flight = executor.submit(self._snapshot_and_complete, checkpoint_id, offsets, updated)

    def _snapshot_and_complete(
        self, checkpoint_id: CheckpointId, offsets: Offsets, updated: set[SystemStreamPartition]
    ) -> None:
        """On the commit thread: the held cut's writes, the producers' flush, the snapshot, then the stores write
        back again; then upload, checkpoint and cleanup (``_complete_commit``). A failure fails the next commit."""
        storage = self.storage
        try:
            phase = self._clock()
            try:
                if storage is not None:
                    storage.write_held()
                self.producers.flush(self.task_name)
                phase = self._timed("flush", phase)
                self.settings.pause("before-snapshot")
                markers = storage.snapshot(checkpoint_id) if storage is not None else {}
            finally:
                if storage is not None:
                    storage.release()
            self._timed("snapshot", phase)
            self.settings.pause("after-snapshot")
        except BaseException as error:  # raised by the next commit, on the task's thread
            log.error("%s: commit %s failed: %s: %s", self.task_name, checkpoint_id, type(error).__name__, error)
            self._commit_failure = (checkpoint_id, error)
            return
        self._complete_commit_recording_failure(checkpoint_id, offsets, markers, updated)

    def commit_if_owed(self) -> None:
        """Make the commit skipped while the last one uploaded, once that upload ended. Called by the run
        loop between batches; free while nothing is owed."""
        if self.commit_owed and (self._in_flight is None or self._in_flight.done()):
            self.commit()

    def _complete_commit_recording_failure(
        self, checkpoint_id: CheckpointId, offsets: Offsets, markers: Markers, updated: set[SystemStreamPartition]
    ) -> None:
        try:
            self._complete_commit(checkpoint_id, offsets, markers, updated)
        except BaseException as error:  # raised by the next commit, on the task's thread
            log.error("%s: commit %s failed: %s: %s", self.task_name, checkpoint_id, type(error).__name__, error)
            self._commit_failure = (checkpoint_id, error)

    def _complete_commit(
        self, checkpoint_id: CheckpointId, offsets: Offsets, markers: Markers, updated: set[SystemStreamPartition]
    ) -> None:
        """Upload → write checkpoints → startpoints → cleanup: the asynchronous stage of a commit."""
        storage = self.storage
        phase = self._clock()
        uploaded = storage.upload(checkpoint_id, markers) if storage is not None else {}
        phase = self._timed("upload", phase)
        self.settings.pause("after-upload")
        checkpoints = self._checkpoints(checkpoint_id, offsets, uploaded)
        if storage is not None:
            storage.write_local_checkpoint(checkpoint_id, checkpoints)
        if checkpoints:  # with the checkpoints of the container's other tasks committing now (group commit)
            self.checkpoint_manager.write_task_checkpoints(self.task_name, self._write_order(checkpoints))
        self._timed("checkpoint", phase)
        self.last_checkpoint = checkpoints[-1] if checkpoints else None
        self.commits += 1
        if self.transaction is not None:  # durable only once the container's transaction commits
            self.transaction.after_commit(lambda: self._after_checkpoint(checkpoint_id, offsets, uploaded, updated))
        else:
            self._after_checkpoint(checkpoint_id, offsets, uploaded, updated)

    def _checkpoints(self, checkpoint_id: CheckpointId, offsets: Offsets, uploaded: Markers) -> list[Checkpoint]:
        """The checkpoints of ``task.checkpoint.write.versions``, in that order: a V1 names the stores' state by
        their changelog offsets, a V2 by the backends' markers."""
        storage = self.storage
        checkpoints: list[Checkpoint] = []
        for version in self.settings.write_versions:
            if version == 1:
                v1_offsets: dict[SystemStreamPartition, str | None] = dict(offsets)
                if storage is not None:
                    v1_offsets.update(storage.changelog_offsets(checkpoint_id, uploaded))
                checkpoints.append(CheckpointV1(v1_offsets))
            else:
                checkpoints.append(CheckpointV2(checkpoint_id, offsets, uploaded))
        return checkpoints

    def _after_checkpoint(
        self, checkpoint_id: CheckpointId, offsets: Offsets, uploaded: Markers, updated: set[SystemStreamPartition]
    ) -> None:
        """What may only follow a durable checkpoint: startpoints it applied go, intermediate records it read
        are purged, snapshots it no longer needs are cleaned up."""
        self._startpoints_applied(updated)
        if self.purger is not None:
            self.purger.after_checkpoint(offsets)
        self.settings.pause("after-checkpoint")
        storage = self.storage
        if storage is not None:
            phase = self._clock()
            storage.cleanup(checkpoint_id, uploaded)
            self._timed("cleanup", phase)
        if self.meters is not None:
            self.meters.committed(self._clock() - self._commit_started)

    def _write_order(self, checkpoints: list[Checkpoint]) -> list[Checkpoint]:
        """The version the task resumes from is written first: a crash between the writes then leaves that
        version the newer one, so the restart resumes from this commit instead of from the one before it
        (or, before any V2 existed, from no checkpoint at all)."""
        if not self._resumes_from_v2:
            return checkpoints
        return sorted(checkpoints, key=lambda checkpoint: checkpoint.version, reverse=True)

    def _timed(self, phase: str, since: float) -> float:
        """Record commit ``phase`` as having run from ``since`` until now; return now, where the next starts."""
        now = self._clock()
        if self.meters is not None:
            self.meters.commit_phase(phase, now - since)
        return now

    def _wait_for_commit(self, tolerate_timeout: bool = False) -> bool:
        """Wait for the commit in flight; False when it outlasted ``task.commit.timeout.ms`` and the timeout
        is tolerated (``task.commit.skip.commit.during.failures.enabled``), else that raises."""
        in_flight = self._in_flight
        if in_flight is None:
            return True
        settings = self.settings
        done, _ = wait_for([in_flight], settings.timeout_ms / 1000)
        if done:
            self._in_flight = None
            return True
        what = (
            f"task '{self.task_name}': commit {self._in_flight_id} did not finish uploading within "
            f"task.commit.timeout.ms={settings.timeout_ms}"
        )
        if (
            tolerate_timeout
            and settings.skip_during_failures
            and self.commits_timed_out < settings.max_skipped_timeouts
        ):
            self.commits_timed_out += 1
            log.warning(
                "%s: commit skipped (%d of %d timeouts tolerated)",
                what,
                self.commits_timed_out,
                settings.max_skipped_timeouts,
            )
            return False
        raise CommitTimeoutError(what + _limit_reached(settings, "timeout", self.commits_timed_out))

    def _raise_commit_failure(self, tolerate: bool = True) -> None:
        """Raise the failure of the last asynchronous commit, unless it is one of the failures the
        container tolerates (``task.commit.skip.commit.*``): its offsets stay uncheckpointed, and the
        next commit covers them. The final commit of a task is never skipped (``tolerate=False``)."""
        failure = self._commit_failure
        if failure is None:
            return
        checkpoint_id, error = failure
        if isinstance(error, FencedError):  # a newer attempt owns the writes: the container hands over, not fails
            raise error
        settings = self.settings
        what = f"task '{self.task_name}': commit {checkpoint_id} failed: {type(error).__name__}: {error}"
        if (
            tolerate
            and settings.skip_during_failures
            and self.commit_failures_skipped < settings.max_skipped_exceptions
        ):
            self.commit_failures_skipped += 1
            self._commit_failure = None
            self._snapshotted = {}  # nothing was checkpointed: the next commit must write one, even if idle
            log.warning(
                "%s; skipped (%d of %d failures tolerated)",
                what,
                self.commit_failures_skipped,
                settings.max_skipped_exceptions,
            )
            return
        raise CommitFailedError(what + _limit_reached(settings, "exception", self.commit_failures_skipped)) from error

    def wait_for_commit(self) -> None:
        """Wait for the commit in flight, then raise its failure (under the commit-failure policy), without starting
        another; free when none is in flight."""
        self._wait_for_commit()
        self._raise_commit_failure()

    def finish_commits(self) -> None:
        """Before the container returns: wait for the commit in flight, and commit what a skipped
        commit left uncommitted. Raises the failure of any of them; a failure of the last commit that the
        policy tolerates (``task.commit.skip.commit.*``) makes another, until one succeeds or the limit is reached.
        Then the stores' local checkpoints that were not due at the last commit are made for it (``seal``)."""
        self._wait_for_commit()
        self._raise_commit_failure()
        self.commit()
        self._wait_for_commit()
        while self._commit_failure is not None:
            self._raise_commit_failure()  # raises past the limit (or when nothing is tolerated)
            self.commit()
            self._wait_for_commit()
        if self.storage is not None:
            self.storage.seal()  # a restart on this host then replays nothing (stores.<s>.local.checkpoint.interval.ms)


def _limit_reached(settings: CommitSettings, kind: str, tolerated: int) -> str:
    if not settings.skip_during_failures:
        return ""
    return f" (after {tolerated} tolerated: task.commit.skip.commit.{kind}.max.limit)"
