"""One container's watermarks of a produced stream, combined: one record per partition, not one per task.

In broadcast mode each producing task used to send its watermark to every partition of the intermediate
stream: P producing tasks and Q partitions cost P x Q records per watermark interval (16,384 per 200 ms at
128 x 128). The tasks of a container run on one thread and write through one producer per system, so the
container can speak for all of them: per stream and interval it sends each partition one
``CombinedWatermarkMessage`` carrying the *minimum* of its producing tasks' watermarks and the names of
the tasks it covers — C x Q records per interval for C containers.

*Aggregate mode* (``app.control.aggregation``, Samza's two-phase route, ``sender``) combines the first hop the
same way: the container sends one record to the stream's aggregate partition, not one per task, and the
aggregating task re-broadcasts what it reconciled — C + Q - 1 records per interval instead of P + Q - 1.

Why it is safe. A task's watermark ``W`` promises that nothing it writes later has a timestamp below
``W``; the minimum over several tasks is a lower bound of each, so the same promise holds for every task
named. The record must follow everything the named tasks wrote before their watermarks. Broadcast: it is
written after everything they wrote to that partition before (one thread, one producer per system, one
transaction under exactly-once), so it follows their earlier output as their own watermark would have.
Aggregate mode: a record to one partition is not ordered with a task's output to the others, so a task
reports a watermark here only after a flush made its earlier output durable (the protocol defers the report
to the task's next flush, as it deferred the task's own record before): everything every named task wrote
below its reported watermark is durable before the record is written, whichever task's collector writes it.
Under exactly-once the record goes through the container's one transactional producer after that output, so
it becomes visible in the same transaction or a later one. A consumer raises each named task's watermark to
the record's (never lowers it: ``reconciliation``), so its per-producer tracking and "every producer
reported" rule are unchanged — the aggregating task's as well, which re-broadcasts the reconciled result as
it did for one record per task — and its minimum over all producers is the minimum over the containers'
minima: the same watermark as before.

Not with an idle timeout (``task.watermark.idle.timeout.ms``; the wiring gives such tasks no combiner, in
either mode): a consumer's idle rule drops a producer it has not heard from within the timeout, but a record
names every task of its container whose watermark it covers, the idle one too, at the minimum the idle one
holds back — the consumer would hear from the idle task at every interval and could never tell it apart.
Each task then sends its own records.

What is covered. Every task of the container that reported a watermark of the stream, including one
that finished (its last watermark is the maximum, so it keeps rising with the others downstream rather
than holding the partition back until the stream ends); a task that never reported one is not named, and
consumers wait for it as before. A task leaves (``leave``) when it closes.

What is sent. A record goes out only when it raises the watermark of at least one task it names — a
minimum that advanced, or a task named for the first time — and is paced per stream like a task's own
watermarks (``pacing``: the first of an interval at once, later ones held back and released by whichever
of the container's tasks' timer comes first once the interval passed; a minimum that passed a window
boundary goes out at once). A held-back record is computed anew when released, from the watermarks of
that moment.

The budget. A round costs C x Q records per interval, which at 128 x 128 is 1 % or 4 % of the user records
depending only on how fast the job processes them; with a ``WatermarkBudget`` (``budget``,
``app.control.watermark.budget.*``) a round the pacer lets through goes out only when the stream's share of the
user records its tasks wrote (``wrote``) plus a small floor pays for its records, else it waits — released by a
later timer call, ``due`` — for at most the budget's maximum delay. Narrow streams and aggregate mode's one-record
rounds are not budgeted. A window boundary's early round pays like any other. A restored task's re-report is not
held back by the budget (it is paced as before): it may be what a consumer waits for. The budget only delays a
round, which is then computed from the watermarks of its moment like any held-back one: everything above holds.

Restarts. A task's newest watermarks (``reported``) are part of its snapshot, as a held-back watermark
was, and re-reported after a restore: sent at once, or within an interval when another restored task of
the container took the interval's send (aggregate mode: at the task's first flush). All of them, covered by a
record or not: the record that covered one may have been written through another task's collector, and
whether it is durable when this task's checkpoint is written depends on that task's flush (a producer may
flush per task), so a restart sends them again rather than trusting it — a duplicate changes nothing
downstream. A restarted container, or a task that moved to another container in a new generation, starts
with an empty combiner and may send a lower watermark for a task than one a consumer already counted:
harmless, a consumer keeps the maximum. A record the earlier attempt wrote naming a task that moved is
likewise only a lower bound of that task's watermark, which its restored snapshot re-reports.

Pure bookkeeping over an injected clock (seconds): frames come back as ``ControlSend`` for the calling
task to write. Not thread-safe, and needs none: one container's tasks share it on its run-loop thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from millstream.control.budget import BudgetSettings, WatermarkBudget
from millstream.control.framing import frame_control_message
from millstream.control.messages import MIN_WATERMARK, CombinedWatermarkMessage
from millstream.control.pacing import WatermarkPacer
from millstream.control.protocol import ControlSend, ProducedStream
from millstream.control.sender import control_targets
from millstream.model import SystemStream


@dataclass
class _Stream:
    """One produced stream in the container: its producing tasks' watermarks and what records said of them."""

    produced: ProducedStream
    members: set[str] = field(default_factory=set)
    """The container's tasks that produce to the stream."""
    marks: dict[str, int] = field(default_factory=dict)
    """The newest watermark each member reported (only ever raised)."""
    sent: dict[str, int] = field(default_factory=dict)
    """Per member, the timestamp of the last record that named it."""

    def record(self) -> CombinedWatermarkMessage | None:
        """The record to send now: the minimum over the members that reported, naming them; None when it
        would raise none of them."""
        marks = self.marks
        if not marks:
            return None
        low = min(marks.values())
        sent = self.sent
        if all(sent.get(task, MIN_WATERMARK) >= low for task in marks):
            return None
        return CombinedWatermarkMessage(low, tuple(sorted(marks)), self.produced.task_count)


class WatermarkCombiner:
    """The container's combined watermarks of its produced streams (module docstring): tasks ``join`` with
    the streams they produce, ``report`` their watermarks and get back the sends to write; ``due`` releases
    held-back records on a timer call. ``interval_ms`` and ``boundary_ms`` pace them as ``WatermarkPacer``;
    ``aggregate``: records go to each stream's aggregate partition only (``app.control.aggregation``), and the
    tasks report only watermarks whose earlier output a flush made durable."""

    def __init__(
        self,
        interval_ms: int,
        boundary_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
        aggregate: bool = False,
        budget: BudgetSettings | None = None,
    ) -> None:
        self.pacer: WatermarkPacer[SystemStream] = WatermarkPacer(interval_ms, boundary_ms)
        self.clock = clock
        self.aggregate = aggregate
        self.streams: dict[SystemStream, _Stream] = {}
        self.budget: WatermarkBudget[SystemStream] = WatermarkBudget(budget or BudgetSettings())
        """What rounds may cost (``budget``; ``app.control.watermark.budget.*``): unbudgeted when not given."""
        self.urgent: set[SystemStream] = set()
        """Streams whose held-back round carries a restored task's re-report: not held back by the budget."""

    def wrote(self, stream: SystemStream, records: int) -> None:
        """A task of the container wrote ``records`` user records to ``stream`` (feeds the budget)."""
        self.budget.wrote(stream, records)

    def join(self, task: str, produced: Iterable[ProducedStream]) -> None:
        """``task`` of this container produces ``produced``; a stream's partition and task counts are the
        first joiner's (every task of a job model sees the same)."""
        for stream in produced:
            self.streams.setdefault(stream.stream, _Stream(stream)).members.add(task)

    def leave(self, task: str) -> None:
        """``task`` closed: later records no longer name it (consumers keep what earlier ones said)."""
        for entry in self.streams.values():
            entry.members.discard(task)
            entry.marks.pop(task, None)
            entry.sent.pop(task, None)

    def report(
        self, task: str, stream: SystemStream, watermark: int, restored: bool = False
    ) -> tuple[ControlSend, ...]:
        """``task``'s watermark of ``stream`` advanced: the record to send now, or nothing (no task raised, or
        held back for the interval or the budget). ``restored``: a re-report after a restore, which the budget
        does not hold back."""
        entry = self.streams.get(stream)
        if entry is None or task not in entry.members:
            raise KeyError(f"task '{task}' did not join the combined watermarks of '{stream}'")
        if watermark <= entry.marks.get(task, MIN_WATERMARK):
            return ()
        entry.marks[task] = watermark
        record = entry.record()
        if record is None:
            return ()
        if restored:
            self.urgent.add(stream)
        now, pacer = self.clock(), self.pacer
        if pacer.allows(stream, record.timestamp, now) and self._affords(entry, now):
            pacer.sent(stream, record.timestamp, now)
            return self._sends(entry, record, now)
        pacer.hold(stream, record.timestamp)
        return ()

    def due(self) -> tuple[ControlSend, ...]:
        """The held-back records whose interval passed and the budget pays for (or that waited its maximum
        delay), computed from the watermarks of now."""
        sends: list[ControlSend] = []
        now, pacer = self.clock(), self.pacer
        for stream, held in list(pacer.pending.items()):
            entry = self.streams[stream]
            if not pacer.allows(stream, held, now) or not self._affords(entry, now):
                continue
            pacer.sent(stream, held, now)
            record = entry.record()
            if record is not None:
                sends.extend(self._sends(entry, record, now))
            else:
                self.budget.spent(stream, 0, now)
                self.urgent.discard(stream)
        return tuple(sends)

    def _affords(self, entry: _Stream, now: float) -> bool:
        """Whether the budget lets a due round of ``entry`` out now (a restored re-report's always)."""
        stream = entry.produced.stream
        return stream in self.urgent or self.budget.affords(stream, self._cost(entry), now)

    def _cost(self, entry: _Stream) -> int:
        """The records a round of ``entry`` writes: one per partition, or one (aggregate mode)."""
        return 1 if self.aggregate else entry.produced.partition_count

    def reported(self, task: str) -> dict[SystemStream, int]:
        """``task``'s newest watermark of each stream it reported one of (part of its snapshot: re-sent after
        a restart, covered by a record or not, see the module docstring)."""
        return {stream: entry.marks[task] for stream, entry in self.streams.items() if task in entry.marks}

    def _sends(self, entry: _Stream, record: CombinedWatermarkMessage, now: float) -> tuple[ControlSend, ...]:
        self.budget.spent(entry.produced.stream, self._cost(entry), now)
        self.urgent.discard(entry.produced.stream)
        for task in record.task_names:
            entry.sent[task] = max(record.timestamp, entry.sent.get(task, MIN_WATERMARK))
        produced, frame = entry.produced, frame_control_message(record)
        targets = control_targets(produced.stream.stream, produced.partition_count, self.aggregate)
        return tuple(ControlSend(produced.stream, partition, frame) for partition in targets)
