"""``OperatorGraphTask``: the StreamTask of every high-level job, and ``TaskGraph``, its testable core.

A task reads two kinds of partitions. *Source* partitions carry the user's messages, decoded by the
run loop with the descriptors' serdes. *Intermediate* partitions carry framed records
(``millstream.control.framing``), read as raw bytes: user messages are decoded here with the
``partition_by``'s serdes and go into the operators; control messages go to the task's
``ControlProtocol`` (``millstream.control.protocol``), which owns everything about watermarks and
end-of-stream — reconciliation, what to send where, what to defer, what to re-send after a restart —
and answers with ``ControlEvents`` this module carries out: frames to write, partitions to declare
ended or drained to the runtime (``coordinator.end_of_stream`` / ``coordinator.drained``, which stop
polling them), input operators whose watermark to raise or which to finish (or finish as drained). A
``partition_by``'s watermarks and end-of-stream go to the protocol the same way. The protocol never sees
an operator; the operators never see a control message.

Each input operator's watermark is the minimum over the task's partitions of its stream; operators
downstream take the minimum over their inputs (``graph``).

**Restarts.** At every commit, after the output was flushed and before the checkpoint, the task writes
its control state — the protocol's (reconciliation, event-time progress, ended partitions, control
messages in flight), watermarks and end-of-stream per operator, and the offsets of the last message each
of them reflects. A job with stateful operators writes it into the task's operator store, beside the
operators' entries (``operators.state``), so the store's snapshot in the checkpoint carries both as of
the same instant; a job without any writes it to the metadata store (``control-state/<task>``). A
restarted task loads it and skips the envelopes a restart replays up to those offsets
(``millstream.control.replay``: their effects are in the state, and their output was flushed before the
state was written), so its state is exactly what an uninterrupted run would have, and no producer's
end-of-stream is forgotten.
Reconciliation itself is idempotent as well, so a duplicate control message (an upstream task restarted
and sent it again) changes nothing.

**Drain.** When the job drains, the runtime stops reading the task's source partitions and reports each
(``on_partition_drain``); the protocol finishes their streams as drained, the operators fire what they
hold with the final watermark and the ``partition_by``s send drain messages of the task's run downstream,
where the same happens once every producer drained. Nothing of it is saved as ended (see the protocol).
An intermediate record of a type this version does not know — a newer producer's control message — is
skipped with a warning and counted (``ControlStats.unknown_skipped``), so versions can be rolled.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from millstream.api.application import KV
from millstream.api.specs import InputSpec, OperatorSpec, PartitionBySpec
from millstream.api.task import (
    AsyncStreamTask,
    CheckpointListener,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    InitableTask,
    MessageCollector,
    PartitionDrainListenerTask,
    PartitionEndOfStreamListenerTask,
    StreamTask,
    TaskContext,
    TaskCoordinator,
    WindowableTask,
)
from millstream.contracts.metrics import Measurement
from millstream.control.combining import WatermarkCombiner
from millstream.control.errors import UnknownMessageTypeError
from millstream.control.framing import MessageType, frame_user_message, unframe
from millstream.control.messages import MAX_WATERMARK, MIN_WATERMARK
from millstream.control.protocol import (
    NO_EVENTS,
    ConsumedStream,
    ControlEvents,
    ControlProtocol,
    ControlSend,
    ProducedStream,
    ProtocolSettings,
    SourceInput,
)
from millstream.control.replay import Comparator, ReplayFilter
from millstream.errors import MillstreamError
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.operators.async_chain import DirectRecorded, Recorded
from millstream.operators.graph import AsyncMapImpl, GraphContext, InputImpl, OperatorError, OperatorGraph, OperatorImpl
from millstream.operators.state import InMemoryState, KeyValueState
from millstream.serde.base import Serde, SerdeError

log = logging.getLogger(__name__)

__all__ = [
    "AsyncOperatorGraphTask",
    "Comparator",
    "ControlState",
    "ControlStats",
    "GraphSettings",
    "IntermediateSerdeError",
    "IntermediateStreamInfo",
    "OperatorGraphTask",
    "TaskGraph",
]


class ControlState(Protocol):
    """Where a task's control state persists between runs: the metadata store (``ControlStateStore``) or
    the task's operator store (``StoreControlState``)."""

    def load(self) -> dict[str, Any] | None: ...

    def save(self, snapshot: Mapping[str, Any]) -> None: ...


class IntermediateSerdeError(SerdeError):
    """A ``partition_by`` key or value cannot be (de)serialized; names the operator, stream and offset.
    A serde error, so ``task.process.errors`` decides what happens to the message that caused it."""


@dataclass(frozen=True)
class GraphSettings:
    aggregate: bool = False
    """Samza's two-phase control messages through one partition (``app.control.aggregation``)."""
    idle_timeout_ms: int = -1
    quorum_percentage: float = 0.5
    max_out_of_orderness_ms: int = 0
    """Default of the inputs' bounded out-of-orderness."""
    watermark_interval_ms: int = 0
    """At most one watermark per produced stream per interval (``app.control.watermark.interval.ms``)."""
    watermark_boundary_ms: int = 0
    """The application's window boundary period (``planner.watermark_boundary_ms``): watermarks passing a
    window end go out at once (``millstream.control.boundary``); 0: none."""

    def protocol(self) -> ProtocolSettings:
        return ProtocolSettings(
            self.aggregate,
            self.idle_timeout_ms,
            self.quorum_percentage,
            self.watermark_interval_ms,
            self.watermark_boundary_ms,
        )


@dataclass(frozen=True)
class IntermediateStreamInfo:
    """What a task needs to know of an intermediate stream it reads or writes."""

    spec: PartitionBySpec
    stream: SystemStream
    partition_count: int
    key_serde: Serde
    msg_serde: Serde


@dataclass
class ControlStats:
    """What this task wrote to and read from intermediate streams; logged when the task closes."""

    sent: int = 0
    sent_bytes: int = 0
    received: int = 0
    received_bytes: int = 0
    user_sent: int = 0
    user_sent_bytes: int = 0
    unknown_skipped: int = 0
    """Records of a type byte this version does not know (a newer producer's), skipped."""


class _Source:
    """How the user's messages of a source stream enter the graph."""

    __slots__ = ("impl", "kv", "spec", "stream", "timestamp")

    def __init__(self, spec: InputSpec, impl: InputImpl) -> None:
        self.spec = spec
        self.stream = spec.descriptor.system_stream
        self.impl = impl
        self.kv = spec.descriptor.kv
        self.timestamp = spec.descriptor.timestamp


class _Intermediate:
    """How the user messages of an intermediate stream enter the graph."""

    __slots__ = ("impl", "info")

    def __init__(self, info: IntermediateStreamInfo, impl: InputImpl) -> None:
        self.info = info
        self.impl = impl


class _Output:
    """The producing side of one intermediate stream in this task (``graph.IntermediateOutput``): user
    messages are written here, control messages go through the protocol."""

    def __init__(self, graph: TaskGraph, info: IntermediateStreamInfo) -> None:
        self.graph = graph
        self.info = info
        self.encode_key = info.key_serde.to_bytes
        self.encode_value = info.msg_serde.to_bytes
        self.written = 0
        """User messages written, counted here on the hot path; ``credit`` hands them on in bulk."""
        self.credited = 0

    def credit(self) -> None:
        """Hand the user messages written since the last call to the task's counts and its container's watermark
        budget (``millstream.control.budget``): per timer call and watermark, not per message."""
        records = self.written - self.credited
        if records:
            self.credited = self.written
            self.graph.stats.user_sent += records
            self.graph.control.on_output_records(self.info.stream, records)

    def send(self, key: Any, value: Any, timestamp: int) -> None:
        info = self.info
        try:
            key_bytes = None if key is None else self.encode_key(key)
            payload = frame_user_message(self.encode_value(value))
        except SerdeError as error:
            raise IntermediateSerdeError(
                f"partition_by '{info.spec.name}' cannot serialize a message for '{info.stream}': {error} "
                "(map it to plain values first — a WindowPane or KV is a tuple — or name another serde with "
                "key_serde= / msg_serde=)"
            ) from None
        graph = self.graph
        graph.context.send(OutgoingMessageEnvelope(info.stream, payload, key_bytes, timestamp=timestamp))
        self.written += 1
        graph.stats.user_sent_bytes += len(payload) + (len(key_bytes) if key_bytes else 0)

    def watermark(self, watermark: int) -> None:
        self.credit()
        self.graph.apply(self.graph.control.on_output_watermark(self.info.stream, watermark))

    def end_of_stream(self) -> None:
        self.graph.apply(self.graph.control.on_output_end_of_stream(self.info.stream))

    def drain(self) -> None:
        self.graph.apply(self.graph.control.on_output_drain(self.info.stream))


class TaskGraph:
    """One task's operators, inputs and outputs, driving its ``ControlProtocol``; free of the metadata
    store and systems (``OperatorGraphTask`` wires those in), so it can be driven envelope by envelope."""

    def __init__(
        self,
        *,
        task_name: str,
        operators: list[OperatorSpec],
        source_inputs: list[InputSpec],
        intermediate_inputs: list[IntermediateStreamInfo],
        intermediate_outputs: list[IntermediateStreamInfo],
        producer_counts: Mapping[str, int],
        ssps: frozenset[SystemStreamPartition],
        settings: GraphSettings | None = None,
        comparators: Mapping[str, Comparator] | None = None,
        clock: Callable[[], float] = time.monotonic,
        state_factory: Callable[[str], KeyValueState] | None = None,
        run_id: str = "",
        combiner: WatermarkCombiner | None = None,
    ) -> None:
        self.task_name = str(task_name)
        self.run_id = run_id
        self.settings = settings or GraphSettings()
        self.ssps = ssps
        self.context = GraphContext()
        self.stats = ControlStats()
        self.replay = ReplayFilter(comparators)
        owned = {ssp.system_stream for ssp in ssps}
        sources = [spec for spec in source_inputs if spec.descriptor.system_stream in owned]
        consumed = [info for info in intermediate_inputs if info.stream in owned]
        self._outputs = {info.spec.op_id: _Output(self, info) for info in intermediate_outputs}
        self.states: list[KeyValueState] = []
        """Every operator's state, flushed before each snapshot of the task's stores."""
        make_state = state_factory or InMemoryState

        def state_of(op_id: str) -> KeyValueState:
            if any(getattr(state, "name", None) == op_id for state in self.states):
                raise MillstreamError(
                    f"task '{self.task_name}': a second state named '{op_id}' (each state of an operator needs a "
                    "name of its own: its key prefix in the task's operator store)"
                )
            state = make_state(op_id)
            self.states.append(state)
            return state

        self.graph = OperatorGraph(
            operators,
            {spec.op_id: (spec, spec.descriptor.system_stream) for spec in sources},
            {info.spec.op_id: (info.spec, info.stream) for info in consumed},
            self._outputs,
            self.context,
            state_of,
        )
        self.producing = set(self.graph.live_partition_bys())
        for op_id in self.producing:
            if producer_counts.get(op_id, 0) < 1:
                raise MillstreamError(
                    f"task '{self.task_name}': no producer count for partition_by '{op_id}' "
                    "(is the job model published?)"
                )
        self._sources = {
            spec.descriptor.system_stream: _Source(spec, self.graph.inputs[spec.descriptor.system_stream])
            for spec in sources
        }
        self._intermediates = {info.stream: _Intermediate(info, self.graph.inputs[info.stream]) for info in consumed}
        self.control = self._protocol(sources, consumed, intermediate_outputs, producer_counts, clock, combiner)
        self.dirty = False
        """The offsets or operators changed since the last snapshot (the protocol tracks its own)."""

    def _protocol(
        self,
        sources: list[InputSpec],
        consumed: list[IntermediateStreamInfo],
        produced: list[IntermediateStreamInfo],
        producer_counts: Mapping[str, int],
        clock: Callable[[], float],
        combiner: WatermarkCombiner | None,
    ) -> ControlProtocol:
        """The task's control protocol over the partitions it owns and the streams it produces; ``combiner``:
        its container's combined watermarks (``millstream.control.combining``), shared by its tasks."""

        def owned(stream: SystemStream) -> frozenset[SystemStreamPartition]:
            return frozenset(ssp for ssp in self.ssps if ssp.system_stream == stream)

        default_ooo = self.settings.max_out_of_orderness_ms
        return ControlProtocol(
            self.task_name,
            self.ssps,
            sources=[
                SourceInput(
                    spec.descriptor.system_stream,
                    owned(spec.descriptor.system_stream),
                    default_ooo
                    if spec.descriptor.max_out_of_orderness_ms is None
                    else spec.descriptor.max_out_of_orderness_ms,
                )
                for spec in sources
            ],
            consumed=[ConsumedStream(info.stream, info.partition_count, owned(info.stream)) for info in consumed],
            produced=[
                ProducedStream(info.stream, info.partition_count, producer_counts.get(info.spec.op_id, 0))
                for info in produced
            ],
            settings=self.settings.protocol(),
            clock=clock,
            run_id=self.run_id,
            combiner=combiner,
        )

    # --- task calls -------------------------------------------------------------------------------

    def init(self, task_context: TaskContext) -> None:
        self.graph.init(task_context)

    def close(self) -> None:
        self.graph.close()
        for output in self._outputs.values():
            output.credit()
        self.control.close()

    def process(
        self,
        envelope: IncomingMessageEnvelope,
        collector: MessageCollector,
        coordinator: TaskCoordinator,
        recorded: Recorded | None = None,
    ) -> None:
        """Run one envelope through the graph. ``recorded``: a user message whose run through the prefix of
        async operators was recorded when it started (``operators.async_chain``); its deliveries are made
        now instead of running it from its input."""
        self._bind(collector, coordinator)
        ssp = envelope.ssp
        control = self.control
        if ssp in control.ended or ssp in control.drained or not self.replay.accept(ssp, envelope.offset):
            return
        self.dirty = True
        try:
            source = self._sources.get(ssp.system_stream)
            if recorded is not None:
                events = NO_EVENTS if source is None else control.on_source_message(ssp, recorded.timestamp)
                recorded.deliver()
                self.apply(events)
            elif source is not None:
                self._process_source(source, envelope)
            elif (route := self._intermediates.get(ssp.system_stream)) is not None:
                self._process_intermediate(route, envelope)
            else:
                raise MillstreamError(
                    f"task '{self.task_name}' got offset {envelope.offset} of '{ssp.system}.{ssp.stream}' "
                    f"partition {ssp.partition}, which is neither an input nor an intermediate stream of its stage"
                )
        except OperatorError as error:
            raise located(error, envelope) from error.__cause__

    def entry(self, envelope: IncomingMessageEnvelope) -> tuple[InputImpl, Any, int] | None:
        """Where a user message enters the graph: its input operator, the message as that operator hands it
        on, and its event time; None for a control message or a stream of no input of the task's."""
        stream = envelope.ssp.system_stream
        source = self._sources.get(stream)
        if source is not None:
            return source.impl, _source_message(source, envelope), _source_timestamp(source, envelope)
        route = self._intermediates.get(stream)
        if route is None:
            return None
        user = self._intermediate_message(route, envelope, starting=True)
        return None if user is None else (route.impl, user, envelope.timestamp)

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """The timer: source watermarks, idle producers, and (aggregate mode) a flush of the task's output, after
        which the control messages held back for it go out. A flush, not a commit: a commit per tick made
        commits scale with ticks (issue 40); the control state the next commit writes covers what went out. A
        collector that cannot flush (a test double) gets the commit instead."""
        self._bind(collector, coordinator)
        for output in self._outputs.values():
            output.credit()
        self.apply(self.control.on_timer())
        if self.control.wants_commit:
            self._flush_for_control()

    def _flush_for_control(self) -> None:
        """Flush the task's output so the control messages held back for it go out (the aggregate route)."""
        collector, coordinator = self.context.collector, self.context.coordinator
        flush = getattr(collector, "flush", None)
        if flush is None:
            assert coordinator is not None
            coordinator.commit()
        else:
            flush()
            self.apply(self.control.on_flush())

    def partition_ended(
        self, ssp: SystemStreamPartition, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """A partition reached end-of-stream in the runtime: a source's, or one this task declared."""
        self._bind(collector, coordinator)
        self.apply(self.control.on_end_of_stream(ssp))

    def partition_drained(
        self, ssp: SystemStreamPartition, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """The runtime stopped reading a partition because the job drains (a source's, or one this task
        declared drained)."""
        self._bind(collector, coordinator)
        self.apply(self.control.on_drain(ssp))

    def flush_state(self) -> None:
        """Write the operators' cached state changes to where they persist (the task's store)."""
        for state in self.states:
            state.flush()

    def before_checkpoint(self) -> dict[str, Any] | None:
        """After a flush: control messages sent so far are durable; deferred ones (the aggregate route) go out
        now, and are flushed at once: the runtime flushed the task's output before this call, and a task that
        finishes with this commit — a producer sending its end-of-stream — has no later flush, so they would
        wait in the producer for another task's (seconds of end-of-stream latency). They stay in flight in the
        snapshot all the same: under exactly-once they are durable only with the container's commit.
        Returns the snapshot to persist, or None when nothing changed since the last one; the operators'
        cached state changes are written in any case."""
        changed = self.dirty or self.control.unsaved
        released = self.control.on_flush()
        self.apply(released)
        flush = getattr(self.context.collector, "flush", None)
        if released.sends and flush is not None:
            flush()
        self.flush_state()
        if not changed:
            return None
        self.dirty = False
        self.control.saved()
        return self.snapshot()

    # --- state ------------------------------------------------------------------------------------

    def measurements(self) -> list[Measurement]:
        """Gauges of where event time stands, read by the metrics reporter's thread at snapshot time (so
        the hot path pays nothing): the watermark of each input partition and each operator's input
        watermark, in seconds since the epoch; a watermark not known yet or final (end-of-stream) is left
        out, so its gauge keeps the last finite value."""
        values: list[Measurement] = []
        for ssp, mark in self.control.partition_watermarks().items():
            if MIN_WATERMARK < mark < MAX_WATERMARK:
                labels = {"system": ssp.system, "stream": ssp.stream, "partition": str(ssp.partition)}
                values.append(("input_watermark_timestamp_seconds", "gauge", labels, mark / 1000))
        for operator in list(self.graph.operators):
            mark = operator.input_watermark
            if MIN_WATERMARK < mark < MAX_WATERMARK:
                values.append(
                    ("operator_watermark_timestamp_seconds", "gauge", {"operator": operator.op_id}, mark / 1000)
                )
        return values

    @property
    def task_watermark(self) -> int:
        """The minimum watermark over this task's input partitions."""
        return self.control.task_watermark

    @property
    def ended(self) -> set[SystemStreamPartition]:
        """Input partitions that reached end-of-stream."""
        return self.control.ended

    @property
    def offsets(self) -> dict[SystemStreamPartition, str]:
        """The offset of the last envelope of each partition the state reflects."""
        return self.replay.offsets

    @property
    def comparators(self) -> dict[str, Comparator]:
        """Offset order per system, for skipping what a restart replays."""
        return self.replay.comparators

    @comparators.setter
    def comparators(self, comparators: Mapping[str, Comparator]) -> None:
        self.replay.comparators = dict(comparators)

    def snapshot(self) -> dict[str, Any]:
        control = self.control.snapshot()
        return {
            "offsets": self.replay.snapshot(),
            "ended": control["ended"],
            "reconciler": control["reconciler"],
            "sources": control["sources"],
            "operators": self.graph.snapshot(),
            "in_flight": control["in_flight"],
            "held_back": control["held_back"],
        }

    def restore(
        self, snapshot: Mapping[str, Any], repositioned: frozenset[SystemStreamPartition] = frozenset()
    ) -> None:
        """Load a snapshot taken at a commit (before ``init`` of the functions and the first message).

        ``repositioned`` partitions were moved by a startpoint or ``reset.offset``: what they deliver
        is new input even below the snapshot's offsets, so they are neither skipped nor ended.
        """
        self.replay.restore(snapshot.get("offsets", {}), self.ssps - repositioned)
        self.control.restore(snapshot, repositioned)
        self.graph.restore(snapshot.get("operators", {}))

    # --- inputs -----------------------------------------------------------------------------------

    def _bind(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        context = self.context
        context.collector = collector
        context.coordinator = coordinator
        resumed = self.control.resume()
        if resumed is not NO_EVENTS:
            self.apply(resumed)

    def _process_source(self, source: _Source, envelope: IncomingMessageEnvelope) -> None:
        message = envelope.message
        timestamp = envelope.timestamp if source.timestamp is None else _source_timestamp(source, envelope)
        events = self.control.on_source_message(envelope.ssp, timestamp)
        source.impl.process(KV(envelope.key, message) if source.kv else message, timestamp)
        self.apply(events)  # a window boundary passed: the watermark moves now, after the message

    def _process_intermediate(self, route: _Intermediate, envelope: IncomingMessageEnvelope) -> None:
        user = self._intermediate_message(route, envelope)
        if user is not None:
            route.impl.process(user, envelope.timestamp)

    def _intermediate_message(
        self, route: _Intermediate, envelope: IncomingMessageEnvelope, starting: bool = False
    ) -> KV | None:
        """The user message of an intermediate record, decoded; None for a control message, which goes to
        the protocol (or a record of an unknown type, skipped) — unless ``starting`` (an async start, before
        the release that will handle it)."""
        try:
            kind, payload = unframe(envelope.message, _where(envelope))
        except UnknownMessageTypeError as error:
            if not starting:
                self._skip_unknown(error)
            return None
        if kind == MessageType.USER_MESSAGE:
            info = route.info
            try:
                key = None if envelope.key is None else info.key_serde.from_bytes(envelope.key)
                value = info.msg_serde.from_bytes(payload)  # type: ignore[arg-type]
            except SerdeError as error:
                raise IntermediateSerdeError(
                    f"partition_by '{info.spec.name}': cannot deserialize {_where(envelope)}: {error}"
                ) from None
            return KV(key, value)
        if starting:
            return None
        assert not isinstance(payload, bytes)
        self.stats.received += 1
        self.stats.received_bytes += len(envelope.message)
        self.apply(self.control.on_control_message(envelope.ssp, payload))
        return None

    def _skip_unknown(self, error: UnknownMessageTypeError) -> None:
        """A newer producer's control message: skipped, so a consumer may be upgraded after its producers."""
        stats = self.stats
        stats.unknown_skipped += 1
        if stats.unknown_skipped == 1 or stats.unknown_skipped % 1000 == 0:
            log.warning(
                "task '%s' skipped %s (a newer producer's control message?); %d skipped so far",
                self.task_name, error, stats.unknown_skipped,
            )  # fmt: skip

    # --- carrying out the protocol's events -------------------------------------------------------

    def apply(self, events: ControlEvents) -> None:
        """Do what the protocol asked, in ``ControlEvents``' order."""
        if events is NO_EVENTS:
            return
        for send in events.sends:
            self._send_frame(send)
        coordinator = self.context.coordinator
        if events.ended or events.drained:
            assert coordinator is not None
            for ssp in events.ended:
                coordinator.end_of_stream(ssp)
            for ssp in events.drained:
                coordinator.drained(ssp)
        inputs = self.graph.inputs
        for stream, watermark in events.advance:
            impl = inputs[stream]
            if not impl.ended and watermark > impl.input_watermark:
                self.dirty = True  # windows may fire: the state to persist changes with the watermark
                impl.advance(watermark)
        for stream in events.finish:
            inputs[stream].finish()
        for stream in events.drain:
            impl = inputs[stream]
            if not impl.ended:  # an input that ended for good stays ended
                impl.drained = True
                impl.finish()
        if events.flush:
            self._flush_for_control()

    def _send_frame(self, send: ControlSend) -> None:
        self.context.send(OutgoingMessageEnvelope(send.stream, send.frame, None, partition=send.partition))
        self.stats.sent += 1
        self.stats.sent_bytes += len(send.frame)


def _source_message(source: _Source, envelope: IncomingMessageEnvelope) -> Any:
    return KV(envelope.key, envelope.message) if source.kv else envelope.message


def _source_timestamp(source: _Source, envelope: IncomingMessageEnvelope) -> int:
    if source.timestamp is None:
        return envelope.timestamp
    try:
        return int(source.timestamp(envelope.message))
    except Exception as error:
        raise OperatorError(
            f"input '{source.stream}': the timestamp function failed at offset {envelope.offset} of "
            f"partition {envelope.ssp.partition}: {type(error).__name__}: {error}"
        ) from error


def located(error: OperatorError, envelope: IncomingMessageEnvelope) -> OperatorError:
    """``error`` naming the envelope it failed on as well as its operator."""
    ssp = envelope.ssp
    return OperatorError(
        f"{error} (at offset {envelope.offset} of stream '{ssp.system}.{ssp.stream}' partition {ssp.partition})"
    )


def _where(envelope: IncomingMessageEnvelope) -> str:
    ssp = envelope.ssp
    return f"offset {envelope.offset} of stream '{ssp.system}.{ssp.stream}' partition {ssp.partition}"


class OperatorGraphTask(
    StreamTask,
    InitableTask,
    WindowableTask,
    ClosableTask,
    EndOfStreamListenerTask,
    PartitionEndOfStreamListenerTask,
    DrainListenerTask,
    PartitionDrainListenerTask,
    CheckpointListener,
):
    """Runs the stage(s) of ``app.class`` for one task (see the module docstring)."""

    def __init__(self) -> None:
        self.graph: TaskGraph | None = None
        self.state_store: ControlState | None = None
        self._closers: list[Callable[[], Any]] = []

    def init(self, context: TaskContext) -> None:
        from millstream.operators.wiring import build_task_graph

        self.graph, self.state_store, self._closers = build_task_graph(context)
        snapshot = self.state_store.load()
        if snapshot is not None:
            self.graph.restore(snapshot, repositioned=getattr(context, "repositioned", frozenset()))
            log.info("%s: restored control state (%d partition(s) ended)", context.task_name, len(self.graph.ended))
        self.graph.init(context)

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        assert self.graph is not None
        self.graph.process(envelope, collector, coordinator)

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        assert self.graph is not None
        self.graph.window(collector, coordinator)

    def on_partition_end_of_stream(
        self, ssp: SystemStreamPartition, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        assert self.graph is not None
        self.graph.partition_ended(ssp, collector, coordinator)

    def on_end_of_stream(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Every partition ended: each input already finished its operators."""

    def on_partition_drain(
        self, ssp: SystemStreamPartition, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        assert self.graph is not None
        self.graph.partition_drained(ssp, collector, coordinator)

    def on_drain(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """Every partition ended or drained: each input already finished its operators as drained."""

    def measurements(self) -> list[Measurement]:
        """The engine's own gauges (watermarks per input and operator): see ``TaskGraph.measurements``."""
        return [] if self.graph is None else self.graph.measurements()

    def before_checkpoint(self) -> None:
        assert self.graph is not None and self.state_store is not None
        snapshot = self.graph.before_checkpoint()
        if snapshot is not None:
            self.state_store.save(snapshot)

    def close(self) -> None:
        if self.graph is not None:
            self.graph.close()
            stats = self.graph.stats
            log.info(
                "%s: intermediate streams: %d user message(s) written; control messages %d sent (%d B), "
                "%d received (%d B), %d of an unknown type skipped, %d drain(s) of another run ignored",
                self.graph.task_name, stats.user_sent, stats.sent, stats.sent_bytes, stats.received,
                stats.received_bytes, stats.unknown_skipped, self.graph.control.ignored_drains,
            )  # fmt: skip
        for close in self._closers:
            try:
                close()
            except MillstreamError as error:
                log.warning("ignored while closing the operator graph task: %s", error)


class AsyncOperatorGraphTask(OperatorGraphTask, AsyncStreamTask):
    """The graph task of an application with ``map_async`` / ``flat_map_async`` (the planner picks it).

    ``process_async`` runs the message through the prefix of the graph's async operators — the operators
    before them, and the awaits themselves — and records what the prefix hands to the rest of the graph
    (``operators.async_chain``); the rest is deferred: when the runtime releases the message — in offset
    order per partition when the operators are ordered — the graph takes it as ``process`` would, with the
    recorded deliveries made in place of its run from the input. Watermarks, windows, state and joins after
    the prefix therefore see exactly what a synchronous graph would give them; the runtime's window of
    messages in flight gives the concurrency, and checkpoints cover only released messages
    (``runtime/async_tasks.py``). A message of an input no async operator follows is only deferred.
    """

    def init(self, context: TaskContext) -> None:
        from millstream.operators.async_chain import AsyncChains

        super().init(context)
        assert self.graph is not None
        self._chains = AsyncChains(self.graph.graph)
        self._chained = frozenset(impl.stream for impl in self._chains.entries)
        """The streams whose messages start with a run through the prefix."""
        self._direct: dict[SystemStream, tuple[_Source, AsyncMapImpl, list[OperatorImpl]]] = {}
        """Source streams whose input one async operator follows directly, and no other: ``AsyncChains.direct``."""
        for stream, source in self.graph._sources.items():
            direct = self._chains.direct(source.impl)
            if direct is not None:
                self._direct[stream] = (source, *direct)

    async def process_async(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        graph = self.graph
        assert graph is not None
        recorded: Recorded | None = None
        stream = envelope.ssp.system_stream
        direct = self._direct.get(stream)
        try:
            if direct is not None:  # the common case inlined: one await per message costs no more than before
                if not envelope.is_end_of_stream:
                    source, impl, targets = direct
                    message = envelope.message
                    timestamp = envelope.timestamp if source.timestamp is None else _source_timestamp(source, envelope)
                    results = await impl.call(KV(envelope.key, message) if source.kv else message)
                    recorded = DirectRecorded(timestamp, results, targets)
            elif stream in self._chained and not envelope.is_end_of_stream:
                entry = graph.entry(envelope)
                if entry is not None:
                    recorded = await self._chains.run(*entry)
        except OperatorError as error:
            raise located(error, envelope) from error.__cause__

        def release(released_to: MessageCollector) -> None:
            graph.process(envelope, released_to, coordinator, recorded)

        defer = getattr(collector, "defer", None)
        if defer is None:  # called by hand, not by the runtime: nothing to wait for
            release(collector)
        else:
            defer(release)
