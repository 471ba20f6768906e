"""The container's single-threaded loop: poll → deserialize → process → window → commit.

Partitions are served round-robin at batch granularity: every partition with data gets its polled
batch processed in each pass, and the pass starts one partition later each time, so a busy partition
cannot starve the others. Timers (window, commit, stop check) run between batches, and so do the commits
a task asked for while its previous commit still uploaded (made as soon as that upload ended).

**Final commits as a group.** A task that ends (end-of-stream or drain on all its partitions) handles its end at
once — its end-of-stream listeners run, its operators fire their last windows, its output is sent — but leaves
its final commit to the loop (``TaskInstance.defer_final_commit``). At the end of the round the loop flushes the
output of the tasks that ended in it; it makes their final commits, together, from the first round after that
which ends no further task (that round polls without waiting), for ``FINAL_COMMIT_SLICE_S`` a round, the
rest in the next rounds, each again after a poll without waiting. So when end-of-stream reaches many tasks of a
container at about the same time, each of them handles it before any of them pays for a final commit (a store's
write-back, flushes and snapshot: tens of milliseconds a task), and one whose end-of-stream arrives while a large
group commits handles it within a slice, instead of the last one waiting for every commit before it. The
snapshots themselves run on the commit threads (``TaskCommitter.commit(final=True)``). Under exactly-once the
group is one transaction. A final commit is not skipped or reordered otherwise: each task's checkpoint still
follows its own output and snapshot (``TaskCommitter``), a failure raises from that task's commit, the commit
timer and the loop's last commit cover a group not yet committed, and the loop returns (the container finishes)
only after every final commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from millstream.contracts.systems import FencedError
from millstream.errors import MillstreamError
from millstream.model import SystemStream, SystemStreamPartition
from millstream.runtime.dead_letters import send_to_dead_letters
from millstream.runtime.drain import DrainMonitor
from millstream.runtime.seams import Clock, ConsumerMultiplexer, LingeringOutput, ProducerLookup, SystemClock
from millstream.runtime.task_instance import TaskInstance
from millstream.runtime.transaction import ContainerTransaction
from millstream.serde.base import SerdeError

log = logging.getLogger(__name__)

Decoder = Callable[[bytes], Any]


FINAL_COMMIT_SLICE_S = 0.05
"""How long a round of the run loop makes final commits before it polls again (``RunLoop._final_commits``): about
two of a stateful task's final commits on a loaded 2-core machine, short next to the end-of-stream lag it bounds."""


class DeserializationError(MillstreamError):
    """A message could not be decoded by its stream's serde; names stream, partition and offset."""


@dataclass
class DeadLetterPolicy:
    """``task.drop.deserialization.errors``: skip undecodable messages, count them, keep them aside."""

    drop: bool
    stream: SystemStream | None
    producers: ProducerLookup
    dropped: int = 0
    keep_raw: bool = False
    """Keep each message's bytes beside its decoded objects (``task.process.errors=dead-letter`` sends them)."""


@dataclass
class RunLoopSettings:
    window_ms: int
    commit_ms: int
    poll_interval_ms: int
    stop_check_ms: int = 500


@dataclass
class RunLoopStats:
    polls: int = 0
    batches: int = 0
    commit_seconds: float = 0.0
    first_message_at: float | None = None
    last_message_at: float | None = None
    final_commits: int = 0
    """Tasks whose final commit the loop made in a group (``_final_commits``)."""
    final_commit_groups: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class RunLoop:
    def __init__(
        self,
        consumers: ConsumerMultiplexer,
        tasks: list[TaskInstance],
        decoders: Mapping[SystemStream, tuple[Decoder | None, Decoder | None]],
        dead_letters: DeadLetterPolicy,
        settings: RunLoopSettings,
        stop_requested: Callable[[], bool],
        clock: Clock | None = None,
        drain: DrainMonitor | None = None,
        output: LingeringOutput | None = None,
        transaction: ContainerTransaction | None = None,
    ) -> None:
        """``clock`` is what the timers run on. The tasks compare their processing deadline on their own
        clock, so both must be the same one: the real monotonic clock, unless a test moves time by hand.
        ``output``: the producers, asked between batches to send what they held back for batching long
        enough (``linger.ms``), so output is visible within milliseconds, not at the next commit."""
        self.consumers = consumers
        self.clock = clock or SystemClock()
        self.tasks = tasks
        self.decoders = dict(decoders)
        self.dead_letters = dead_letters
        self.settings = settings
        self.stop_requested = stop_requested
        self.drain = drain
        self.output = output
        self.transaction = transaction
        """Exactly-once: one commit of all tasks in one transaction, instead of one commit per task."""
        self.stats = RunLoopStats()
        self.dispatch: dict[SystemStreamPartition, list[TaskInstance]] = {}
        for task in tasks:
            for ssp in task.ssps:
                self.dispatch.setdefault(ssp, []).append(task)
        self.stopped_by_request = False
        self.ended: list[TaskInstance] = []
        """Tasks that ended, in the order they did, whose final commit the loop makes (``_final_commits``)."""
        for task in tasks:
            task.defer_final_commit(self.ended)
        self.async_tasks = [task for task in tasks if task.async_processor is not None]
        """``AsyncStreamTask``s: while they have messages in flight, the loop waits on the event loop, not in a poll."""
        processors = [task.async_processor for task in self.async_tasks if task.async_processor is not None]
        if processors:
            processors[0].container_loop.processors = processors

    def run(self) -> None:
        """Run until every task finished (end-of-stream or shutdown request) or a stop is requested."""
        settings = self.settings
        clock = self.clock
        now = clock.monotonic()
        next_window = now + settings.window_ms / 1000 if settings.window_ms > 0 else float("inf")
        next_commit = now + settings.commit_ms / 1000 if settings.commit_ms > 0 else float("inf")
        next_stop_check = now
        active = {ssp for ssp, tasks in self.dispatch.items() if any(not t.finished for t in tasks)}
        pending: dict[SystemStreamPartition, list[Any]] = {}
        """Decoded envelopes a task has not reached yet because a timer fell due; served before polling again."""
        poll_timeout = settings.poll_interval_ms / 1000
        rotation = 0
        ended = self.ended
        grouped = 0
        """How many of ``ended`` had ended before this round."""
        while active:
            now = clock.monotonic()
            deadline = min(next_window, next_commit, next_stop_check)
            lingering = self.output.send_lingering() if self.output is not None else None
            pollable = active - pending.keys() if pending else active
            batches: Mapping[SystemStreamPartition, list[Any]] = {}
            wait = poll_timeout if lingering is None else min(poll_timeout, lingering)
            in_flight = bool(self.async_tasks) and self._async_in_flight()
            if pollable:
                # output held back for batching: look without waiting, and send it if no input is there
                looks_only = pending or in_flight or lingering is not None or bool(ended)
                timeout = 0.0 if looks_only else max(0.0, min(wait, deadline - now))
                batches = self.consumers.poll(pollable, timeout)
                self.stats.polls += 1
            work = list(pending.items())
            pending.clear()
            work.extend((ssp, self._decode(ssp, batch)) for ssp, batch in batches.items() if batch)
            if lingering is not None and not work and self.output is not None:
                self.output.send_lingering(drained=True)  # nothing would join the held batch: lingering only delays
            if work:
                rotation = (rotation + 1) % len(work)
                for ssp, batch in work[rotation:] + work[:rotation]:
                    self._deliver(ssp, batch, deadline, active, pending)
                if self._container_shutdown_requested():
                    break
            if in_flight:
                self._drive_async(0.0 if work or ended else max(0.0, min(wait, deadline - clock.monotonic())))
                if self._container_shutdown_requested():
                    break
            now = clock.monotonic()
            if now >= next_window:
                for task in self.tasks:
                    task.window()
                next_window = now + settings.window_ms / 1000
                if self._container_shutdown_requested():
                    break
            if now >= next_commit:
                self.commit_all()
                next_commit = clock.monotonic() + settings.commit_ms / 1000
            else:
                self._commit_owed()
            if now >= next_stop_check:
                if self.stop_requested():
                    self.stopped_by_request = True
                    log.info("stop requested: committing and stopping")
                    break
                next_stop_check = now + settings.stop_check_ms / 1000
            if self.drain is not None:
                self.drain.poll(pending)  # drained partitions join the ended ones below
            grouped = self._end_round(grouped)
            # a task may have declared a partition ended (coordinator.end_of_stream): stop polling it
            active = {
                ssp for ssp in active if any(not t.finished and ssp not in t.end_of_stream for t in self.dispatch[ssp])
            }
        for task in self.async_tasks:  # stopping: the last commit covers the messages in flight
            task.settle_async()
        self._final_commits()
        self.commit_all()

    def _end_round(self, grouped: int) -> int:
        """Flush the output of the tasks that ended in this round; if none did, make the final commits still to
        be made. Returns how many tasks had ended by the end of this round."""
        ended = self.ended
        if len(ended) > grouped:
            if self.transaction is None:  # exactly-once: visible when the group's transaction commits
                for task in ended[grouped:]:
                    task.flush_output()
        elif ended:
            self._final_commits(FINAL_COMMIT_SLICE_S)
        return len(ended)

    def _final_commits(self, slice_s: float = float("inf")) -> None:
        """The final commits of the tasks that ended and were not committed since (by the commit timer), in the
        order they ended, for about ``slice_s`` at most: the rest wait for the next round, after a poll without
        waiting, so a task whose end-of-stream arrives while a large group commits handles it within a slice, not
        after the whole group. Under exactly-once one transaction for the container (a commit of one task is a
        commit of all). A task's failed commit does not keep the others from committing (each commit is its own
        task's, under at-least-once); the first failure is raised once they did, and ends the loop. A fenced writer
        is raised at once: every other commit would be refused as well."""
        pending = [task for task in self.ended if task.final_commit_pending]
        self.ended.clear()
        if not pending:
            return
        clock = self.clock
        started = clock.monotonic()
        failure: Exception | None = None
        committed = len(pending)
        if self.transaction is not None:
            self.transaction.commit()
        else:
            for index, task in enumerate(pending):
                if failure is None and index and clock.monotonic() - started >= slice_s:
                    committed = index
                    self.ended.extend(pending[index:])
                    break
                try:
                    task.commit_final()
                except FencedError:
                    raise
                except Exception as error:  # the task's own: raised below, once the others committed
                    failure = failure or error
        stats = self.stats
        stats.final_commits += committed
        stats.final_commit_groups += 1
        elapsed = clock.monotonic() - started
        stats.commit_seconds += elapsed
        log.debug(
            "final commits of %d task(s) made together in %.3f s (%d left for the next round)",
            committed, elapsed, len(pending) - committed,
        )  # fmt: skip
        if failure is not None:
            raise failure

    def _async_in_flight(self) -> bool:
        return any(task.async_processor.in_flight for task in self.async_tasks if task.async_processor is not None)

    def _drive_async(self, timeout: float) -> None:
        """Run the container's event loop until a message completes or ``timeout`` passed, then release what
        completed (``AsyncStreamTask``s share the loop, so one wait serves them all)."""
        tasks = self.async_tasks
        processor = tasks[0].async_processor
        if processor is not None:
            processor.container_loop.drive(timeout)
        for task in tasks:
            task.harvest_async()

    def commit_all(self) -> None:
        started = self.clock.monotonic()
        if self.transaction is not None:
            self.transaction.commit()
        else:
            for task in self.tasks:
                task.commit()
        self.stats.commit_seconds += self.clock.monotonic() - started

    def _commit_owed(self) -> None:
        """Make the commits skipped while an upload was in flight once it ended: a task that asked to commit
        (to flush end-of-stream to an intermediate stream, or as it finished) must not wait ``task.commit.ms``."""
        for task in self.tasks:
            if task.commit_owed:
                task.commit_if_owed()

    def _container_shutdown_requested(self) -> bool:
        return any(task.shutdown_requested for task in self.tasks)

    def _deliver(
        self,
        ssp: SystemStreamPartition,
        batch: list[Any],
        deadline: float,
        active: set[SystemStreamPartition],
        pending: dict[SystemStreamPartition, list[Any]],
    ) -> None:
        """Hand a decoded batch (maybe ending with end-of-stream) to the tasks that own ``ssp``.

        A partition owned by one task may be cut at ``deadline`` and its rest kept in ``pending``; a
        partition shared by several tasks (broadcast) is given whole to each, so they stay in step.
        """
        end_of_stream = batch[-1].is_end_of_stream
        messages = batch[:-1] if end_of_stream else batch
        tasks = self.dispatch[ssp]
        if messages:
            stats = self.stats
            if stats.first_message_at is None:
                stats.first_message_at = self.clock.monotonic()
            if len(tasks) == 1:
                task = tasks[0]
                if not task.finished:
                    consumed = task.process(ssp, messages, deadline)
                    if consumed < len(messages) and not task.finished and ssp not in task.end_of_stream:
                        pending[ssp] = batch[consumed:]
                        stats.last_message_at = self.clock.monotonic()
                        return
            else:
                for task in tasks:
                    if not task.finished:
                        task.process(ssp, messages)
            stats.batches += 1
            stats.last_message_at = self.clock.monotonic()
        if end_of_stream:
            active.discard(ssp)
            for task in tasks:
                task.mark_end_of_stream(ssp)

    def _decode(self, ssp: SystemStreamPartition, batch: list[Any]) -> list[Any]:
        """Replace bytes by objects in place; undecodable messages fail the container or are set aside."""
        decoders = self.decoders.get(ssp.system_stream, (None, None))
        if decoders == (None, None):
            return batch
        key_decode, msg_decode = decoders
        failed: list[int] = []
        keep_raw = self.dead_letters.keep_raw
        for index, envelope in enumerate(batch):
            if envelope.is_end_of_stream:
                continue
            key, message = envelope.key, envelope.message
            if keep_raw:
                envelope.raw = (key, message)
            try:
                if key_decode is not None and key is not None:
                    key = key_decode(key)
                if msg_decode is not None and message is not None:
                    message = msg_decode(message)
                envelope.key, envelope.message = key, message
            except SerdeError as error:
                if not self.dead_letters.drop:
                    raise DeserializationError(
                        f"cannot deserialize message at offset {envelope.offset} of stream "
                        f"'{ssp.system}.{ssp.stream}' partition {ssp.partition}: {error} "
                        "(set task.drop.deserialization.errors=true to skip such messages)"
                    ) from None
                self._set_aside(ssp, envelope, error)
                failed.append(index)
        if failed:
            skip = set(failed)
            batch = [envelope for index, envelope in enumerate(batch) if index not in skip]
        return batch

    def _set_aside(self, ssp: SystemStreamPartition, envelope: Any, error: SerdeError) -> None:
        policy = self.dead_letters
        policy.dropped += 1
        log.warning(
            "skipped undecodable message at offset %s of %s (%s)%s",
            envelope.offset,
            ssp,
            error,
            f"; sent to {policy.stream}" if policy.stream else "",
        )
        if policy.stream is None:
            return
        source = self.dispatch[ssp][0].task_name  # flushed with that task's output before its checkpoint
        raw = (envelope.key, envelope.message)  # a message that failed to decode still holds its bytes
        send_to_dead_letters(policy.producers, policy.stream, source, envelope, raw, {"reason": str(error)})
