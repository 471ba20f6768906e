"""``OperatorGraphTask``: the StreamTask of every high-level job, and ``TaskGraph``, its testable core.

A task reads two kinds of partitions. *Source* partitions carry the user's messages, decoded by the
run loop with the descriptors' serdes; their watermark is the newest event time minus the allowed
out-of-orderness, emitted every ``task.window.ms``, and their end-of-stream comes from the system.
*Intermediate* partitions carry framed records (``millstream.control.framing``), read as raw bytes:
user messages are decoded here with the ``partition_by``'s serdes, control messages are reconciled per
partition (``millstream.control.reconciliation``). A partition that reconciled end-of-stream is
declared finished to the runtime (``coordinator.end_of_stream``), which stops polling it.

The task's watermark is the minimum over its input partitions; each input operator's watermark is the
minimum over the task's partitions of its stream; operators downstream take the minimum over their
inputs (``graph``).

**Restarts.** At every commit, after the output was flushed and before the checkpoint, the task writes
its whole state — reconciliation per intermediate partition, event-time progress per source partition,
watermarks and end-of-stream per operator, window contents, and the offsets of the last message each of
them reflects — to the metadata store (``control-state/<task>``). A restarted task loads it and skips
the envelopes a restart replays up to those offsets (their effects are in the state, and their output
was flushed before the state was written), so its state is exactly what an uninterrupted run would
have, and no producer's end-of-stream is forgotten. Reconciliation itself is idempotent as well, so a
duplicate control message (an upstream task restarted and sent it again) changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from millstream.api.application import KV
from millstream.api.specs import InputSpec, OperatorSpec, PartitionBySpec
from millstream.api.task import (
    CheckpointListener,
    ClosableTask,
    EndOfStreamListenerTask,
    InitableTask,
    MessageCollector,
    PartitionEndOfStreamListenerTask,
    StreamTask,
    TaskContext,
    TaskCoordinator,
    WindowableTask,
)
from millstream.control.framing import MessageType, frame_control_message, frame_user_message, unframe
from millstream.control.messages import (
    MAX_WATERMARK,
    ControlMessage,
    EndOfStreamMessage,
    WatermarkMessage,
)
from millstream.control.reconciliation import ControlReconciler
from millstream.control.sender import aggregate_partition, control_targets, rebroadcast_targets
from millstream.control.source import SourceWatermarks
from millstream.control.state import ControlStateStore
from millstream.errors import MillstreamError
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.operators.graph import GraphContext, InputImpl, OperatorError, OperatorGraph
from millstream.operators.state import InMemoryState, KeyValueState
from millstream.serde.base import Serde, SerdeError

log = logging.getLogger(__name__)

Comparator = Callable[[str, str], "int | None"]


class IntermediateSerdeError(MillstreamError):
    """A ``partition_by`` key or value cannot be (de)serialized; names the operator, stream and offset."""


@dataclass(frozen=True)
class GraphSettings:
    aggregate: bool = False
    """Samza's two-phase control messages through one partition (``app.control.aggregation``)."""
    idle_timeout_ms: int = -1
    quorum_percentage: float = 0.5
    max_out_of_orderness_ms: int = 0
    """Default of the inputs' bounded out-of-orderness."""


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


class _Source:
    __slots__ = ("impl", "kv", "spec", "ssps", "stream", "timestamp", "watermarks")

    def __init__(self, spec: InputSpec, impl: InputImpl, ssps: frozenset[SystemStreamPartition], ooo: int) -> None:
        self.spec = spec
        self.stream = spec.descriptor.system_stream
        self.impl = impl
        self.ssps = ssps
        self.kv = spec.descriptor.kv
        self.timestamp = spec.descriptor.timestamp
        out_of_orderness = spec.descriptor.max_out_of_orderness_ms
        self.watermarks = SourceWatermarks(ooo if out_of_orderness is None else out_of_orderness, ssps)


class _Intermediate:
    __slots__ = ("impl", "info", "ssps")

    def __init__(self, info: IntermediateStreamInfo, impl: InputImpl, ssps: frozenset[SystemStreamPartition]) -> None:
        self.info = info
        self.impl = impl
        self.ssps = ssps


class _Output:
    """The producing side of one intermediate stream in this task (``graph.IntermediateOutput``)."""

    def __init__(self, graph: TaskGraph, info: IntermediateStreamInfo, task_count: int) -> None:
        self.graph = graph
        self.info = info
        self.task_count = task_count
        self.encode_key = info.key_serde.to_bytes
        self.encode_value = info.msg_serde.to_bytes

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
        stats = graph.stats
        stats.user_sent += 1
        stats.user_sent_bytes += len(payload) + (len(key_bytes) if key_bytes else 0)

    def watermark(self, watermark: int) -> None:
        self.graph.send_control(self.info, WatermarkMessage(watermark, self.graph.task_name, self.task_count))

    def end_of_stream(self) -> None:
        self.graph.send_control(self.info, EndOfStreamMessage(self.graph.task_name, self.task_count))


class TaskGraph:
    """One task's operators, inputs, outputs and control state, free of the metadata store and systems
    (``OperatorGraphTask`` wires those in), so it can be driven envelope by envelope in tests."""

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
    ) -> None:
        self.task_name = str(task_name)
        self.settings = settings or GraphSettings()
        self.ssps = ssps
        self.comparators = dict(comparators or {})
        self.context = GraphContext()
        self.stats = ControlStats()
        owned = {ssp.system_stream for ssp in ssps}
        self._outputs = {
            info.spec.op_id: _Output(self, info, producer_counts.get(info.spec.op_id, 0))
            for info in intermediate_outputs
        }
        self.graph = OperatorGraph(
            operators,
            {
                spec.op_id: (spec, spec.descriptor.system_stream)
                for spec in source_inputs
                if spec.descriptor.system_stream in owned
            },
            {info.spec.op_id: (info.spec, info.stream) for info in intermediate_inputs if info.stream in owned},
            self._outputs,
            self.context,
            state_factory or InMemoryState,
        )
        self.producing = set(self.graph.live_partition_bys())
        for op_id in self.producing:
            if self._outputs[op_id].task_count < 1:
                raise MillstreamError(
                    f"task '{self.task_name}': no producer count for partition_by '{op_id}' "
                    "(is the job model published?)"
                )
        self._sources: dict[SystemStream, _Source] = {}
        for spec in source_inputs:
            stream = spec.descriptor.system_stream
            if stream in owned:
                stream_ssps = frozenset(ssp for ssp in ssps if ssp.system_stream == stream)
                self._sources[stream] = _Source(
                    spec, self.graph.inputs[stream], stream_ssps, self.settings.max_out_of_orderness_ms
                )
        self._intermediates: dict[SystemStream, _Intermediate] = {}
        for info in intermediate_inputs:
            if info.stream in owned:
                stream_ssps = frozenset(ssp for ssp in ssps if ssp.system_stream == info.stream)
                self._intermediates[info.stream] = _Intermediate(info, self.graph.inputs[info.stream], stream_ssps)
        self.reconciler = ControlReconciler(self.settings.idle_timeout_ms, self.settings.quorum_percentage, clock)
        self.reconciler.register(ssp for route in self._intermediates.values() for ssp in route.ssps)
        self.offsets: dict[SystemStreamPartition, str] = {}
        self.ended: set[SystemStreamPartition] = set()
        self._replay_until: dict[SystemStreamPartition, str] = {}
        self._deferred: list[tuple[SystemStream, int, bytes]] = []
        """Aggregate mode: control messages waiting for a flush of this task's earlier output."""
        self._in_flight: list[tuple[SystemStream, int, bytes]] = []
        """Aggregate mode: control messages sent after the last flush (resent after a restart)."""
        self._restore_pending = False
        self.dirty = False

    # --- task calls -------------------------------------------------------------------------------

    def init(self, task_context: TaskContext) -> None:
        self.graph.init(task_context)

    def close(self) -> None:
        self.graph.close()

    def process(
        self, envelope: IncomingMessageEnvelope, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        self._bind(collector, coordinator)
        ssp = envelope.ssp
        if ssp in self.ended:
            return
        if self._replay_until and ssp in self._replay_until and self._replayed(ssp, envelope.offset):
            return
        self.offsets[ssp] = envelope.offset
        self.dirty = True
        try:
            source = self._sources.get(ssp.system_stream)
            if source is not None:
                self._process_source(source, envelope)
            elif (route := self._intermediates.get(ssp.system_stream)) is not None:
                self._process_intermediate(route, envelope)
            else:
                raise MillstreamError(
                    f"task '{self.task_name}' got offset {envelope.offset} of '{ssp.system}.{ssp.stream}' "
                    f"partition {ssp.partition}, which is neither an input nor an intermediate stream of its stage"
                )
        except OperatorError as error:
            raise OperatorError(
                f"{error} (at offset {envelope.offset} of stream '{ssp.system}.{ssp.stream}' partition {ssp.partition})"
            ) from error.__cause__

    def window(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        """The timer: source watermarks, idle producers, and (aggregate mode) a commit to flush control."""
        self._bind(collector, coordinator)
        for source in self._sources.values():
            watermark = source.watermarks.stream_watermark()
            if not source.impl.ended and watermark > source.impl.input_watermark:
                self.dirty = True  # windows may fire: the state to persist changes with the watermark
                source.impl.advance(watermark)
        for ssp in self.reconciler.check_idle():
            self.dirty = True
            self._advance_intermediate(self._intermediates[ssp.system_stream])
        if self._deferred or self._in_flight:
            coordinator.commit()

    def partition_ended(
        self, ssp: SystemStreamPartition, collector: MessageCollector, coordinator: TaskCoordinator
    ) -> None:
        """A partition reached end-of-stream in the runtime: a source's, or one this task declared."""
        self._bind(collector, coordinator)
        source = self._sources.get(ssp.system_stream)
        if source is None or ssp in self.ended:
            return
        self.ended.add(ssp)
        self.dirty = True
        source.watermarks.end(ssp)
        if self.ended >= source.ssps:
            source.impl.finish()
        else:
            source.impl.advance(source.watermarks.stream_watermark())

    def before_checkpoint(self) -> dict[str, Any] | None:
        """After a flush: control messages sent so far are durable; deferred ones (aggregate mode) go out
        now. Returns the snapshot to persist, or None when nothing changed since the last one."""
        changed = self.dirty or bool(self._in_flight) or bool(self._deferred)
        self._in_flight = []
        if self._deferred:
            for stream, partition, frame in self._deferred:
                self._send_frame(stream, partition, frame)
            self._in_flight, self._deferred = self._deferred, []
        if not changed:
            return None
        self.dirty = False
        return self.snapshot()

    # --- state ------------------------------------------------------------------------------------

    @property
    def task_watermark(self) -> int:
        """The minimum watermark over this task's input partitions."""
        marks = [source.watermarks.watermark(ssp) for source in self._sources.values() for ssp in source.ssps]
        marks.extend(self.reconciler.watermark(ssp) for route in self._intermediates.values() for ssp in route.ssps)
        return min(marks, default=MAX_WATERMARK)

    def snapshot(self) -> dict[str, Any]:
        return {
            "offsets": {ssp.key(): offset for ssp, offset in sorted(self.offsets.items())},
            "ended": sorted(ssp.key() for ssp in self.ended),
            "reconciler": self.reconciler.snapshot(),
            "sources": {str(stream): source.watermarks.snapshot() for stream, source in self._sources.items()},
            "operators": self.graph.snapshot(),
            "in_flight": [[str(stream), partition, frame] for stream, partition, frame in self._in_flight],
        }

    def restore(
        self, snapshot: Mapping[str, Any], repositioned: frozenset[SystemStreamPartition] = frozenset()
    ) -> None:
        """Load a snapshot taken at a commit (before ``init`` of the functions and the first message).

        ``repositioned`` partitions were moved by a startpoint or ``reset.offset``: what they deliver
        is new input even below the snapshot's offsets, so they are neither skipped nor ended.
        """
        self.offsets = {
            SystemStreamPartition.parse_key(key): str(offset)
            for key, offset in snapshot.get("offsets", {}).items()
            if SystemStreamPartition.parse_key(key) in self.ssps - repositioned
        }
        self._replay_until = dict(self.offsets)
        self.ended = {
            ssp
            for ssp in map(SystemStreamPartition.parse_key, snapshot.get("ended", ()))
            if ssp in self.ssps - repositioned
        }
        self.reconciler.restore(
            {key: value for key, value in snapshot.get("reconciler", {}).items() if key in {s.key() for s in self.ssps}}
        )
        for stream, source in self._sources.items():
            document = snapshot.get("sources", {}).get(str(stream))
            if document:
                source.watermarks.restore(document)
        self.graph.restore(snapshot.get("operators", {}))
        self._in_flight = [
            (SystemStream.parse(stream), int(partition), bytes(frame))
            for stream, partition, frame in snapshot.get("in_flight", ())
        ]
        self._restore_pending = True

    # --- inputs -----------------------------------------------------------------------------------

    def _bind(self, collector: MessageCollector, coordinator: TaskCoordinator) -> None:
        context = self.context
        context.collector = collector
        context.coordinator = coordinator
        if self._restore_pending:
            self._restore_pending = False
            for stream, partition, frame in self._in_flight:
                self._send_frame(stream, partition, frame)
            for ssp in sorted(self.ended):
                if ssp.system_stream in self._intermediates:
                    coordinator.end_of_stream(ssp)

    def _replayed(self, ssp: SystemStreamPartition, offset: str) -> bool:
        """Whether a restart replays this envelope although the restored state already reflects it."""
        until = self._replay_until[ssp]
        compare = self.comparators.get(ssp.system)
        order = compare(offset, until) if compare is not None else None
        if order is None:
            order = _compare_numeric(offset, until)
        if order is not None and order <= 0:
            return True
        del self._replay_until[ssp]
        return False

    def _process_source(self, source: _Source, envelope: IncomingMessageEnvelope) -> None:
        message = envelope.message
        if source.timestamp is not None:
            try:
                timestamp = int(source.timestamp(message))
            except Exception as error:
                ssp = envelope.ssp
                raise OperatorError(
                    f"input '{source.stream}': the timestamp function failed at offset {envelope.offset} of "
                    f"partition {ssp.partition}: {type(error).__name__}: {error}"
                ) from error
        else:
            timestamp = envelope.timestamp
        source.watermarks.observe(envelope.ssp, timestamp)
        source.impl.process(KV(envelope.key, message) if source.kv else message, timestamp)

    def _process_intermediate(self, route: _Intermediate, envelope: IncomingMessageEnvelope) -> None:
        ssp = envelope.ssp
        kind, payload = unframe(envelope.message, _where(envelope))
        if kind == MessageType.USER_MESSAGE:
            info = route.info
            try:
                key = None if envelope.key is None else info.key_serde.from_bytes(envelope.key)
                value = info.msg_serde.from_bytes(payload)  # type: ignore[arg-type]
            except SerdeError as error:
                raise IntermediateSerdeError(
                    f"partition_by '{info.spec.name}': cannot deserialize {_where(envelope)}: {error}"
                ) from None
            route.impl.process(KV(key, value), envelope.timestamp)
            return
        assert not isinstance(payload, bytes)
        self.stats.received += 1
        self.stats.received_bytes += len(envelope.message)
        self._on_control(route, ssp, payload)

    def _on_control(self, route: _Intermediate, ssp: SystemStreamPartition, message: ControlMessage) -> None:
        result = self.reconciler.apply(ssp, message)
        info = route.info
        if (
            self.settings.aggregate
            and message.task_name is not None
            and ssp.partition == aggregate_partition(info.stream.stream, info.partition_count)
        ):
            copy: ControlMessage | None = None
            if result.end_of_stream:
                copy = EndOfStreamMessage(None, 0)
            elif result.watermark is not None:
                copy = WatermarkMessage(result.watermark, None, 0)
            if copy is not None:
                frame = frame_control_message(copy)
                for partition in rebroadcast_targets(info.stream.stream, info.partition_count):
                    self._send_frame(info.stream, partition, frame)
        if result.end_of_stream:
            self.ended.add(ssp)
            assert self.context.coordinator is not None
            self.context.coordinator.end_of_stream(ssp)
            if self.ended >= route.ssps:
                route.impl.finish()
                return
        if result.watermark is not None or result.end_of_stream:
            self._advance_intermediate(route)

    def _advance_intermediate(self, route: _Intermediate) -> None:
        route.impl.advance(min(self.reconciler.watermark(ssp) for ssp in route.ssps))

    # --- control output ---------------------------------------------------------------------------

    def send_control(self, info: IntermediateStreamInfo, message: ControlMessage) -> None:
        frame = frame_control_message(message)
        targets = control_targets(info.stream.stream, info.partition_count, self.settings.aggregate)
        if self.settings.aggregate:
            self._deferred.extend((info.stream, partition, frame) for partition in targets)
            return
        for partition in targets:
            self._send_frame(info.stream, partition, frame)
        if self.context.coordinator is not None:
            self.context.coordinator.commit()  # flush soon: a watermark is worth little late

    def _send_frame(self, stream: SystemStream, partition: int, frame: bytes) -> None:
        self.context.send(OutgoingMessageEnvelope(stream, frame, None, partition=partition))
        self.stats.sent += 1
        self.stats.sent_bytes += len(frame)


def _where(envelope: IncomingMessageEnvelope) -> str:
    ssp = envelope.ssp
    return f"offset {envelope.offset} of stream '{ssp.system}.{ssp.stream}' partition {ssp.partition}"


def _compare_numeric(first: str, second: str) -> int | None:
    try:
        a, b = int(first), int(second)
    except (TypeError, ValueError):
        return None
    return (a > b) - (a < b)


class OperatorGraphTask(
    StreamTask,
    InitableTask,
    WindowableTask,
    ClosableTask,
    EndOfStreamListenerTask,
    PartitionEndOfStreamListenerTask,
    CheckpointListener,
):
    """Runs the stage(s) of ``app.class`` for one task (see the module docstring)."""

    def __init__(self) -> None:
        self.graph: TaskGraph | None = None
        self.state_store: ControlStateStore | None = None
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
                "%d received (%d B)",
                self.graph.task_name, stats.user_sent, stats.sent, stats.sent_bytes, stats.received,
                stats.received_bytes,
            )  # fmt: skip
        for close in self._closers:
            try:
                close()
            except MillstreamError as error:
                log.warning("ignored while closing the operator graph task: %s", error)
