"""The control protocol of one task: what it sends, forwards, defers and re-sends, and what its inputs say.

The operator engine (``millstream.operators.graph_task``) drives a ``ControlProtocol`` and carries out
the ``ControlEvents`` it returns; the protocol itself never touches a collector, coordinator or
operator, so every rule below can be tested message by message (``tests/control/test_protocol.py``).

*Consuming.* Control messages read from an intermediate partition are reconciled per partition
(``reconciliation``). A partition that reconciled end-of-stream is declared ended to the runtime; the
stream is finished once all of the task's partitions of it ended, otherwise its watermark — the minimum
over the task's partitions — is raised. Source partitions' watermarks come from event times
(``source``), advanced on the timer or at once when they pass a window boundary (``boundary``); their
end-of-stream comes from the system.

*Producing.* A watermark of a produced stream is framed with the task's name and the number of producing
tasks and sent to every partition (broadcast: sent at once, and visible when the task's other output is —
as the producer writes it under at-least-once, at the container's commit under exactly-once; it asks for
no commit), or, in aggregate mode, to the aggregate partition only — deferred until a flush made the task's
earlier output durable (``sender``). Watermarks go out only when they advanced and at most once per
``app.control.watermark.interval.ms`` per stream over time (``pacing``: a watermark that passed a window
boundary, ``boundary``, goes out at once on the send of a later ordinary one), so their cost is bounded by
time. End-of-stream and drain take the aggregate route in both modes: each producer sends one record, not
one per partition, and asks for a flush at once rather than waiting for the timer's. The task reading an
aggregate partition re-broadcasts each reconciled result, without a task name, to the stream's other
partitions (watermarks paced like its own). A task given its container's ``WatermarkCombiner``
(``combining``) hands its watermarks to it instead: the container sends one record per partition (broadcast)
or one to the aggregate partition (aggregate mode) for all of its producing tasks, paced per stream, not one
per task, and a wide stream's rounds within the container's watermark budget (``budget``), fed by the user
records the task reports in bulk (``on_output_records``). In aggregate mode the task still paces its own
watermarks (which bounds its flushes by time) and reports one to the combiner only after a flush made its
earlier output durable.

*Draining* (``millstream job drain``). The runtime stops reading the task's source partitions and
reports each as drained (``on_drain``); a stream whose partitions all ended or drained is finished as
*drained*, and the ``partition_by``s it feeds send a drain message stamped with the run id instead of
end-of-stream (``on_output_drain``). A consumed partition drains when every producer ended or drained
(``reconciliation``); a drain message of another run is ignored and counted (``ignored_drains``): a
restarted job must not drain on what an earlier run left in the stream. Drain is never part of the
snapshot — no partition is saved as ended because it drained, and drain messages are not kept in flight —
so the next run reads on after it.

*Restarts.* Aggregate-route messages sent since the last flush are *in flight*: they are part of the
snapshot, as are the watermarks held back by pacing, and sent again by the first task call after a restore
(a duplicate reconciles to nothing), and
the intermediate partitions that had ended are declared ended again (the runtime forgot them).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from millstream.control.boundary import crosses
from millstream.control.framing import MessageType, frame_control_message
from millstream.control.messages import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    CombinedWatermarkMessage,
    ControlMessage,
    DrainMessage,
    EndOfStreamMessage,
    WatermarkMessage,
)
from millstream.control.pacing import WatermarkPacer
from millstream.control.reconciliation import ControlReconciler, Reconciled
from millstream.control.sender import aggregate_partition, control_targets, rebroadcast_targets
from millstream.control.source import SourceWatermarks
from millstream.model import SystemStream, SystemStreamPartition

if TYPE_CHECKING:
    from millstream.control.combining import WatermarkCombiner

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProtocolSettings:
    aggregate: bool = False
    """Samza's two-phase control messages through one partition (``app.control.aggregation``)."""
    idle_timeout_ms: int = -1
    quorum_percentage: float = 0.5
    watermark_interval_ms: int = 0
    """At most one watermark per produced stream (and per re-broadcast stream) per interval; 0: every
    advance (``app.control.watermark.interval.ms``, see ``pacing``)."""
    watermark_boundary_ms: int = 0
    """The application's window boundary period (``boundary``): a watermark passing a multiple of it is not
    held back — a source's goes out before the next tick, a produced stream's within the interval (if the pacer
    has a send left). 0: no fixed windows, every advance waits for its interval."""


@dataclass(frozen=True, slots=True)
class SourceInput:
    """A source stream the task reads: its partitions and their allowed out-of-orderness."""

    stream: SystemStream
    ssps: frozenset[SystemStreamPartition]
    max_out_of_orderness_ms: int


@dataclass(frozen=True, slots=True)
class ConsumedStream:
    """An intermediate stream the task reads: the stream's partition count and the task's partitions."""

    stream: SystemStream
    partition_count: int
    ssps: frozenset[SystemStreamPartition]


@dataclass(frozen=True, slots=True)
class ProducedStream:
    """An intermediate stream the task writes, and how many tasks (this one included) produce to it."""

    stream: SystemStream
    partition_count: int
    task_count: int


@dataclass(frozen=True, slots=True)
class ControlSend:
    """A framed control message to write to one partition of an intermediate stream."""

    stream: SystemStream
    partition: int
    frame: bytes


@dataclass(frozen=True, slots=True)
class ControlEvents:
    """What the engine must do, in this order: write ``sends``, declare ``ended`` and ``drained``
    partitions to the runtime, raise the watermark of the ``advance`` input streams, finish the ``finish``
    input streams (end-of-stream) and the ``drain`` ones (drained: ended for this run only).

    A broadcast never asks for a commit: correctness does not need one (each control message follows, in
    its partition, the user messages its producer wrote there before, and the control state written at the
    next commit covers it), and output is visible as the producer writes it, not at a commit. Forcing one
    per broadcast made commits scale with timer ticks, and with messages once a tick's work outlasted
    the tick (issue 40)."""

    sends: tuple[ControlSend, ...] = ()
    ended: tuple[SystemStreamPartition, ...] = ()
    advance: tuple[tuple[SystemStream, int], ...] = ()
    finish: tuple[SystemStream, ...] = ()
    drained: tuple[SystemStreamPartition, ...] = ()
    drain: tuple[SystemStream, ...] = ()
    flush: bool = False
    """The aggregate route: end-of-stream or drain, or (aggregate mode) a watermark that passed a window boundary,
    was deferred for a flush of the task's output; flush now (then ``on_flush``) rather than at the next tick, so
    neither the window nor the end of the stream is kept waiting."""

    def __bool__(self) -> bool:
        return bool(self.sends or self.ended or self.advance or self.finish or self.drained or self.drain or self.flush)


NO_EVENTS = ControlEvents()


class ControlProtocol:
    """One task's control state machine over its source, consumed and produced streams (module docstring).

    Not thread-safe: a task's calls come from one thread. ``clock`` (seconds) matters for idle timeouts;
    ``run_id`` is the run this task belongs to: its drain messages carry it, and only drain messages of
    that run count.
    """

    def __init__(
        self,
        task_name: str,
        ssps: frozenset[SystemStreamPartition],
        *,
        sources: Iterable[SourceInput] = (),
        consumed: Iterable[ConsumedStream] = (),
        produced: Iterable[ProducedStream] = (),
        settings: ProtocolSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        run_id: str = "",
        combiner: WatermarkCombiner | None = None,
    ) -> None:
        self.task_name = str(task_name)
        self.run_id = run_id
        self.ssps = ssps
        """Every partition of the task: what a snapshot may restore."""
        self.settings = settings or ProtocolSettings()
        self.sources = {source.stream: source for source in sources}
        self.source_marks = {
            stream: SourceWatermarks(source.max_out_of_orderness_ms, source.ssps, self.settings.watermark_boundary_ms)
            for stream, source in self.sources.items()
        }
        self.consumed = {stream.stream: stream for stream in consumed}
        self.produced = {stream.stream: stream for stream in produced}
        self.clock = clock
        self.reconciler = ControlReconciler(self.settings.idle_timeout_ms, self.settings.quorum_percentage, clock)
        self.reconciler.register(ssp for stream in self.consumed.values() for ssp in stream.ssps)
        self.ended: set[SystemStreamPartition] = set()
        """Input partitions (source or intermediate) that reached end-of-stream."""
        self.drained: set[SystemStreamPartition] = set()
        """Input partitions drained in this run: done like ended ones, but never saved."""
        self.ignored_drains = 0
        """Drain messages of another run, ignored."""
        self.deferred: list[ControlSend] = []
        """The aggregate route (aggregate mode; end-of-stream and drain in both): control messages waiting for a
        flush of this task's earlier output."""
        self.in_flight: list[ControlSend] = []
        """The aggregate route: control messages sent after the last flush (re-sent after a restart)."""
        interval, boundary = self.settings.watermark_interval_ms, self.settings.watermark_boundary_ms
        self.output_pacer: WatermarkPacer[SystemStream] = WatermarkPacer(interval, boundary)
        """Watermarks of produced streams: at most one per interval, window boundaries aside (``pacing``)."""
        self.rebroadcast_pacer: WatermarkPacer[SystemStream] = WatermarkPacer(interval, boundary)
        """Aggregate mode, the aggregating task: reconciled watermarks it copies to the other partitions."""
        self.changed = False
        """The state changed since the last ``saved``."""
        self._resume_pending = False
        self.combiner = combiner
        """The container's combined watermarks (``combining``), which send this task's watermarks of produced
        streams for it, with its container's other tasks'; None: the task's own."""
        self.unreported: dict[SystemStream, int] = {}
        """Aggregate mode with a combiner: watermarks the pacer let through, reported to the combiner at the next
        flush of the task's output (the aggregate route's rule, ``sender``)."""
        if combiner is not None:
            if combiner.aggregate != self.settings.aggregate:
                raise ValueError(
                    f"task '{self.task_name}': its container's watermark combiner sends "
                    f"{'aggregated' if combiner.aggregate else 'broadcast'} records, the task is configured for "
                    f"{'aggregated' if self.settings.aggregate else 'broadcast'} control messages"
                )
            combiner.join(self.task_name, self.produced.values())

    # --- inputs -----------------------------------------------------------------------------------

    def on_source_message(self, ssp: SystemStreamPartition, timestamp: int) -> ControlEvents:
        """A source partition delivered a message with this event time (the hot path: one lookup). The
        stream's watermark advances at once if it passed a window boundary (``source``), else on the timer;
        the engine applies the events after the message went through the graph."""
        marks = self.source_marks[ssp.system_stream]
        self.changed = True
        if not marks.observe(ssp, timestamp):
            return NO_EVENTS
        watermark = marks.boundary_advance()
        return NO_EVENTS if watermark is None else ControlEvents(advance=((ssp.system_stream, watermark),))

    def on_end_of_stream(self, ssp: SystemStreamPartition) -> ControlEvents:
        """A source partition ended in the system: finish its stream, or raise the stream's watermark.
        Nothing for a partition that already ended or is not a source's."""
        source = self.sources.get(ssp.system_stream)
        if source is None or ssp in self.ended or ssp in self.drained:
            return NO_EVENTS
        self.ended.add(ssp)
        self.changed = True
        marks = self.source_marks[source.stream]
        marks.end(ssp)
        return self._source_progress(source, marks)

    def on_drain(self, ssp: SystemStreamPartition) -> ControlEvents:
        """The runtime stopped reading a source partition because the job drains: the partition is done
        for this run (its watermark is the maximum), without being saved as ended. Nothing for a partition
        that is not a source's (an intermediate one drains through its producers' messages) or is done."""
        source = self.sources.get(ssp.system_stream)
        if source is None or ssp in self.ended or ssp in self.drained:
            return NO_EVENTS
        self.drained.add(ssp)
        marks = self.source_marks[source.stream]
        marks.drain(ssp)
        return self._source_progress(source, marks)

    def _source_progress(self, source: SourceInput, marks: SourceWatermarks) -> ControlEvents:
        """A source partition ended or drained: finish the stream once all are done, else advance it."""
        if not source.ssps <= self.ended | self.drained:
            return ControlEvents(advance=((source.stream, marks.advance()),))
        if source.ssps & self.drained:
            return ControlEvents(drain=(source.stream,))
        return ControlEvents(finish=(source.stream,))

    def on_control_message(self, ssp: SystemStreamPartition, message: ControlMessage) -> ControlEvents:
        """A control message read from an intermediate partition: reconcile it, forward the result (the
        aggregate partition's task), declare the partition ended, and finish or advance its stream."""
        consumed = self.consumed[ssp.system_stream]
        if isinstance(message, DrainMessage) and message.run_id != self.run_id:
            self._ignore_drain(ssp, message)
            return NO_EVENTS
        result = self.reconciler.apply(ssp, message)
        self.changed = True  # a producer's watermark or end-of-stream may be recorded without a result
        if result.watermark is None and not result.end_of_stream and not result.drained:
            return NO_EVENTS
        sends = self._rebroadcast(consumed, ssp, message, result)
        if not result.end_of_stream and not result.drained:
            return ControlEvents(sends=sends, advance=((consumed.stream, self._stream_watermark(consumed)),))
        (self.ended if result.end_of_stream else self.drained).add(ssp)
        ended, drained = ((ssp,), ()) if result.end_of_stream else ((), (ssp,))
        if not consumed.ssps <= self.ended | self.drained:
            advance = ((consumed.stream, self._stream_watermark(consumed)),)
            return ControlEvents(sends=sends, ended=ended, drained=drained, advance=advance)
        if consumed.ssps & self.drained:
            return ControlEvents(sends=sends, ended=ended, drained=drained, drain=(consumed.stream,))
        return ControlEvents(sends=sends, ended=ended, finish=(consumed.stream,))

    def _ignore_drain(self, ssp: SystemStreamPartition, message: DrainMessage) -> None:
        self.ignored_drains += 1
        if self.ignored_drains == 1 or self.ignored_drains % 1000 == 0:
            log.warning(
                "%s: ignored a drain message of run '%s' from %s: this task belongs to run '%s' (%d ignored so far; "
                "stages run as separate jobs drain together only with the same app.run.id)",
                ssp, message.run_id, message.task_name or "the aggregating task", self.run_id, self.ignored_drains,
            )  # fmt: skip

    def on_timer(self) -> ControlEvents:
        """The periodic timer: watermarks held back whose interval passed (``pacing``), every source stream's
        watermark, then consumed streams whose watermark advanced because idle producers stopped holding
        it back."""
        now = self.clock()
        sends: list[ControlSend] = []
        for stream, watermark in self.rebroadcast_pacer.due(now):
            sends.extend(self._rebroadcast_frame(self.consumed[stream], WatermarkMessage(watermark, None, 0)))
        for stream, watermark in self.output_pacer.due(now):
            sends.extend(self._watermark_sends(stream, watermark))
        if self.combiner is not None:
            sends.extend(self.combiner.due())  # the container's held-back records: any of its tasks' timers
        advance = [(stream, marks.advance()) for stream, marks in self.source_marks.items()]
        for ssp in self.reconciler.check_idle():
            self.changed = True
            consumed = self.consumed[ssp.system_stream]
            advance.append((consumed.stream, self._stream_watermark(consumed)))
        if sends:
            self.changed = True  # what was held back is no longer part of the snapshot
        if not sends and not advance:
            return NO_EVENTS
        return ControlEvents(sends=tuple(sends), advance=tuple(advance))

    @property
    def task_watermark(self) -> int:
        """The minimum watermark over the task's input partitions."""
        return min(self.partition_watermarks().values(), default=MAX_WATERMARK)

    def partition_watermarks(self) -> dict[SystemStreamPartition, int]:
        """Each input partition's watermark: a source's from its newest event time, an intermediate
        stream's as reconciled over its producers (``MAX_WATERMARK`` once ended or drained)."""
        marks = {
            ssp: self.source_marks[stream].watermark(ssp)
            for stream, source in self.sources.items()
            for ssp in source.ssps
        }
        marks.update((ssp, self.reconciler.watermark(ssp)) for stream in self.consumed.values() for ssp in stream.ssps)
        return marks

    def _stream_watermark(self, consumed: ConsumedStream) -> int:
        return min(self.reconciler.watermark(ssp) for ssp in consumed.ssps)

    def _rebroadcast(
        self, consumed: ConsumedStream, ssp: SystemStreamPartition, message: ControlMessage, result: Reconciled
    ) -> tuple[ControlSend, ...]:
        """Aggregate mode, in the task of the aggregate partition: producers' reconciled result, without a
        task name (authoritative), to the stream's other partitions."""
        stream, count = consumed.stream, consumed.partition_count
        if not self._aggregated(message) or ssp.partition != aggregate_partition(stream.stream, count):
            return ()  # broadcast: the producers' records went to every partition
        if not isinstance(message, CombinedWatermarkMessage) and message.task_name is None:
            return ()  # already a re-broadcast copy
        copy: ControlMessage
        if result.end_of_stream or result.drained:
            self.rebroadcast_pacer.drop(stream)
            copy = EndOfStreamMessage(None, 0) if result.end_of_stream else DrainMessage(None, 0, self.run_id)
        else:
            assert result.watermark is not None
            if not self.rebroadcast_pacer.offer(stream, result.watermark, self.clock()):
                return ()
            copy = WatermarkMessage(result.watermark, None, 0)
        return self._rebroadcast_frame(consumed, copy)

    @staticmethod
    def _rebroadcast_frame(consumed: ConsumedStream, copy: ControlMessage) -> tuple[ControlSend, ...]:
        stream, frame = consumed.stream, frame_control_message(copy)
        targets = rebroadcast_targets(stream.stream, consumed.partition_count)
        return tuple(ControlSend(stream, partition, frame) for partition in targets)

    # --- outputs ----------------------------------------------------------------------------------

    def on_output_watermark(self, stream: SystemStream, watermark: int) -> ControlEvents:
        """The task's watermark of a produced stream advanced: sent now if the stream's interval passed,
        else held back for the timer (``pacing``); with a combiner, by the container for all of its tasks
        (aggregate mode: once the task's pacer let it through and a flush made its earlier output durable)."""
        if self.combiner is not None and not self.settings.aggregate:
            self.changed = True  # the newest reported watermark is part of the snapshot (``combining``)
            sends = self.combiner.report(self.task_name, stream, watermark)
            return ControlEvents(sends=sends) if sends else NO_EVENTS
        pacer = self.output_pacer
        boundary = crosses(pacer.last_mark.get(stream, MIN_WATERMARK), watermark, pacer.boundary_ms)
        if not pacer.offer(stream, watermark, self.clock()):
            self.changed = True  # the held-back watermark is part of the snapshot
            return NO_EVENTS
        sends = self._watermark_sends(stream, watermark)
        if sends:
            return ControlEvents(sends=sends)
        return ControlEvents(flush=True) if boundary and (self.deferred or self.unreported) else NO_EVENTS

    def on_output_records(self, stream: SystemStream, records: int) -> None:
        """The task wrote ``records`` user records to a produced stream since it last said so: they feed its
        container's watermark budget (``budget``; nothing without a combiner)."""
        if self.combiner is not None:
            self.combiner.wrote(stream, records)

    def _watermark_sends(self, stream: SystemStream, watermark: int, restored: bool = False) -> tuple[ControlSend, ...]:
        if self.combiner is not None and self.settings.aggregate:  # reported at the next flush (``on_flush``)
            self.unreported[stream] = max(watermark, self.unreported.get(stream, watermark))
            self.changed = True
            return ()
        if self.combiner is not None:  # a restored held-back watermark: the container's record, if it raises any
            return self.combiner.report(self.task_name, stream, watermark, restored)
        produced = self.produced[stream]
        return self._send(produced, WatermarkMessage(watermark, self.task_name, produced.task_count)).sends

    def on_output_end_of_stream(self, stream: SystemStream) -> ControlEvents:
        """The task will write nothing more to a produced stream: sent once, superseding a held-back watermark."""
        produced = self.produced[stream]
        self._supersede_held_back(stream)
        return self._send(produced, EndOfStreamMessage(self.task_name, produced.task_count))

    def on_output_drain(self, stream: SystemStream) -> ControlEvents:
        """The task will write nothing more to a produced stream in this run: the job drains."""
        produced = self.produced[stream]
        self._supersede_held_back(stream)
        return self._send(produced, DrainMessage(self.task_name, produced.task_count, self.run_id))

    def _supersede_held_back(self, stream: SystemStream) -> None:
        """End-of-stream or drain supersedes the task's own held-back watermark; with a combiner in aggregate mode
        it is reported at the same flush instead, since the container's records name this task with others, and a
        final watermark left out would hold their minimum back until the task closes."""
        held = self.output_pacer.pending.get(stream)
        self.output_pacer.drop(stream)
        if held is not None and self.combiner is not None and self.settings.aggregate:
            self._watermark_sends(stream, held)

    def _send(self, produced: ProducedStream, message: ControlMessage) -> ControlEvents:
        """Broadcast now, or defer until the task's output was flushed (aggregate; end-of-stream and drain
        in both modes)."""
        frame = frame_control_message(message)
        aggregated = self._aggregated(message)
        targets = control_targets(produced.stream.stream, produced.partition_count, aggregated)
        sends = tuple(ControlSend(produced.stream, partition, frame) for partition in targets)
        if aggregated:
            self.deferred.extend(sends)
            # end-of-stream and drain come once per run: flushed now, not at the next tick (issue 36: up to a
            # timer interval of end-of-stream latency per hop); a watermark waits for the tick's flush
            return ControlEvents(flush=True) if isinstance(message, (EndOfStreamMessage, DrainMessage)) else NO_EVENTS
        return ControlEvents(sends=sends)

    def _aggregated(self, message: ControlMessage) -> bool:
        """Whether ``message`` goes through the aggregate partition: every message in aggregate mode; in
        broadcast mode end-of-stream and drain, which each producer sends once — to one partition rather
        than all, since their extra hop costs latency once per run, not once per watermark."""
        return self.settings.aggregate or isinstance(message, (EndOfStreamMessage, DrainMessage))

    @property
    def wants_commit(self) -> bool:
        """The aggregate route: deferred messages and unreported watermarks wait for a flush, in-flight messages
        for theirs. A flush of the task's output is enough (then ``on_flush``): the engine asks for one on its
        timer, not for a commit."""
        return bool(self.deferred or self.in_flight or self.unreported)

    def on_flush(self) -> ControlEvents:
        """The task's output was flushed: what was in flight is durable, the deferred messages go out, and the
        unreported watermarks go to the combiner (its record, if one is due, is written now)."""
        self.in_flight, self.deferred = self.deferred, []
        sends = list(self.in_flight)
        if self.unreported:
            assert self.combiner is not None
            unreported, self.unreported = self.unreported, {}
            for stream, watermark in unreported.items():
                sends.extend(self.combiner.report(self.task_name, stream, watermark))
            self.changed = True  # the reported watermark is part of the snapshot (``combining``)
        return ControlEvents(sends=tuple(sends)) if sends else NO_EVENTS

    # --- state ------------------------------------------------------------------------------------

    @property
    def unsaved(self) -> bool:
        """Whether a snapshot now differs from the last saved one."""
        return self.changed or bool(self.in_flight) or bool(self.deferred) or bool(self.unreported)

    def saved(self) -> None:
        self.changed = False

    def snapshot(self) -> dict[str, Any]:
        """The persisted document's control part (key names are the stored format: keep them)."""
        return {
            "ended": sorted(ssp.key() for ssp in self.ended),
            "reconciler": self.reconciler.snapshot(),
            "sources": {str(stream): marks.snapshot() for stream, marks in self.source_marks.items()},
            "in_flight": [
                [str(send.stream), send.partition, send.frame]
                for send in self.in_flight
                if send.frame[0] != MessageType.DRAIN  # a drain belongs to this run: never re-sent by the next
            ],
            "held_back": {
                "output": {str(stream): mark for stream, mark in self._held_back_output().items()},
                "rebroadcast": {str(stream): mark for stream, mark in self.rebroadcast_pacer.pending.items()},
            },
        }

    def _held_back_output(self) -> Mapping[SystemStream, int]:
        """This task's watermarks of produced streams to send again after a restart: held back by its pacer,
        or (combined) the newest it reported (``combining``: re-sent whether a record covered them or not),
        held back or not yet reported (aggregate mode), whichever is newest."""
        if self.combiner is None:
            return self.output_pacer.pending
        marks = dict(self.combiner.reported(self.task_name))
        for held in (self.unreported, self.output_pacer.pending):
            for stream, watermark in held.items():
                marks[stream] = max(watermark, marks.get(stream, watermark))
        return marks

    def close(self) -> None:
        """The task stops: its container's records no longer name it."""
        if self.combiner is not None:
            self.combiner.leave(self.task_name)

    def restore(
        self, snapshot: Mapping[str, Any], repositioned: frozenset[SystemStreamPartition] = frozenset()
    ) -> None:
        """Load a snapshot taken at a commit; ``resume`` then re-sends and re-declares what it must.

        ``repositioned`` partitions were moved by a startpoint or ``reset.offset``: what they deliver is
        new input, so they are not restored as ended.
        """
        keep = self.ssps - repositioned
        self.ended = {ssp for ssp in map(SystemStreamPartition.parse_key, snapshot.get("ended", ())) if ssp in keep}
        keys = {ssp.key() for ssp in self.ssps}
        self.reconciler.restore({key: value for key, value in snapshot.get("reconciler", {}).items() if key in keys})
        for stream, marks in self.source_marks.items():
            document = snapshot.get("sources", {}).get(str(stream))
            if document:
                marks.restore(document)
        self.in_flight = [
            ControlSend(SystemStream.parse(stream), int(partition), bytes(frame))
            for stream, partition, frame in snapshot.get("in_flight", ())
        ]
        held_back = snapshot.get("held_back") or {}
        self.output_pacer.restore(_held_back(held_back.get("output"), self.produced.keys()))
        self.rebroadcast_pacer.restore(_held_back(held_back.get("rebroadcast"), self.consumed.keys()))
        self._resume_pending = True

    def resume(self) -> ControlEvents:
        """At the first task call after ``restore``: re-send the in-flight messages and the watermarks held
        back, and re-declare the ended intermediate partitions; nothing afterwards."""
        if not self._resume_pending:
            return NO_EVENTS
        self._resume_pending = False
        ended = tuple(ssp for ssp in sorted(self.ended) if ssp.system_stream in self.consumed)
        now = self.clock()
        sends = list(self.in_flight)
        for stream, watermark in self.rebroadcast_pacer.take_all(now).items():
            sends.extend(self._rebroadcast_frame(self.consumed[stream], WatermarkMessage(watermark, None, 0)))
        for stream, watermark in self.output_pacer.take_all(now).items():
            sends.extend(self._watermark_sends(stream, watermark, restored=True))
        return ControlEvents(sends=tuple(sends), ended=ended)


def _held_back(document: Mapping[str, int] | None, known: Iterable[SystemStream]) -> dict[SystemStream, int]:
    """A snapshot's held-back watermarks of the streams this task still has (the plan may have changed)."""
    streams = set(known)
    parsed = {SystemStream.parse(stream): int(mark) for stream, mark in (document or {}).items()}
    return {stream: mark for stream, mark in parsed.items() if stream in streams}
