"""Drive ``TaskGraph``s envelope by envelope, without a runtime, and route what they write between them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from millstream.api.application import StreamApplicationDescriptor
from millstream.control.framing import frame_control_message, frame_user_message
from millstream.control.messages import ControlMessage
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.operators.graph_task import GraphSettings, IntermediateStreamInfo, TaskGraph
from millstream.operators.planner import ApplicationGraph, plan_stages
from millstream.operators.state import KeyValueState
from millstream.serde.builtin import JsonSerde

SOURCE = SystemStream("log", "in")


class Collector:
    def __init__(self) -> None:
        self.sent: list[OutgoingMessageEnvelope] = []

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        self.sent.append(envelope)

    def send_batch(self, stream: SystemStream, messages: Sequence[Any], keys: Sequence[Any] | None = None) -> None:
        for message, key in zip(messages, keys or [None] * len(messages), strict=True):
            self.send(OutgoingMessageEnvelope(stream, message, key))

    def take(self) -> list[OutgoingMessageEnvelope]:
        sent, self.sent = self.sent, []
        return sent

    def to(self, stream: str) -> list[OutgoingMessageEnvelope]:
        return [envelope for envelope in self.sent if str(envelope.system_stream) == stream]


class Coordinator:
    def __init__(self) -> None:
        self.commits = 0
        self.ended: list[SystemStreamPartition] = []

    def commit(self) -> None:
        self.commits += 1

    def shutdown(self) -> None:
        pass

    def end_of_stream(self, ssp: SystemStreamPartition) -> None:
        self.ended.append(ssp)

    def drained(self, ssp: SystemStreamPartition) -> None:
        self.ended.append(ssp)


def application(describe: Callable[[StreamApplicationDescriptor], None]) -> ApplicationGraph:
    descriptor = StreamApplicationDescriptor()
    describe(descriptor)
    return plan_stages(descriptor, app_name="app", app_id="1")


def task_graph(
    app: ApplicationGraph,
    ssps: Iterable[SystemStreamPartition],
    *,
    task_name: str = "Partition 0",
    stages: list[int] | None = None,
    partitions: int = 2,
    producers: int = 2,
    settings: GraphSettings | None = None,
    clock: Callable[[], float] | None = None,
    state_factory: Callable[[str], KeyValueState] | None = None,
) -> TaskGraph:
    run = app.run_set(stages)
    infos = {
        stream.system_stream: IntermediateStreamInfo(
            stream.partition_by, stream.system_stream, partitions, JsonSerde(), JsonSerde()
        )
        for stream in run.intermediate_streams
    }
    extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
    if state_factory is not None:
        extra["state_factory"] = state_factory
    return TaskGraph(
        task_name=task_name,
        operators=list(run.operators),
        source_inputs=list(run.source_inputs),
        intermediate_inputs=[infos[s.system_stream] for s in run.intermediate_inputs],
        intermediate_outputs=[infos[s.system_stream] for s in run.intermediate_outputs],
        producer_counts={s.partition_by.op_id: producers for s in run.intermediate_outputs},
        ssps=frozenset(ssps),
        settings=settings,
        **extra,
    )


class Driver:
    """One task: its graph, collector and coordinator, and per-partition offsets of what it was fed."""

    def __init__(self, graph: TaskGraph) -> None:
        self.graph = graph
        self.collector = Collector()
        self.coordinator = Coordinator()
        self.offsets: dict[SystemStreamPartition, int] = {}
        graph.init(None)  # type: ignore[arg-type]

    def _offset(self, ssp: SystemStreamPartition) -> str:
        offset = self.offsets.get(ssp, -1) + 1
        self.offsets[ssp] = offset
        return str(offset)

    def source(self, ssp: SystemStreamPartition, message: Any, timestamp: int, key: Any = None) -> None:
        envelope = IncomingMessageEnvelope(ssp, self._offset(ssp), key, message, timestamp)
        self.graph.process(envelope, self.collector, self.coordinator)

    def user(self, ssp: SystemStreamPartition, key: Any, value: Any, timestamp: int) -> None:
        serde = JsonSerde()
        framed = frame_user_message(serde.to_bytes(value))
        envelope = IncomingMessageEnvelope(ssp, self._offset(ssp), serde.to_bytes(key), framed, timestamp)
        self.graph.process(envelope, self.collector, self.coordinator)

    def control(self, ssp: SystemStreamPartition, message: ControlMessage) -> None:
        envelope = IncomingMessageEnvelope(ssp, self._offset(ssp), None, frame_control_message(message), 0)
        self.graph.process(envelope, self.collector, self.coordinator)

    def deliver(self, envelope: OutgoingMessageEnvelope, partition: int) -> None:
        """An envelope another task wrote to an intermediate partition this task reads."""
        ssp = envelope.system_stream.partition(partition)
        incoming = IncomingMessageEnvelope(
            ssp, self._offset(ssp), envelope.key, envelope.message, envelope.timestamp or 0
        )
        self.graph.process(incoming, self.collector, self.coordinator)

    def tick(self) -> None:
        self.graph.window(self.collector, self.coordinator)

    def end(self, ssp: SystemStreamPartition) -> None:
        self.graph.partition_ended(ssp, self.collector, self.coordinator)

    def checkpoint(self) -> dict[str, Any] | None:
        return self.graph.before_checkpoint()


def route(envelopes: Iterable[OutgoingMessageEnvelope], partitions: int) -> dict[int, list[OutgoingMessageEnvelope]]:
    """Which partition of an intermediate stream each envelope lands in (pinned, else by key)."""
    import zlib

    routed: dict[int, list[OutgoingMessageEnvelope]] = {p: [] for p in range(partitions)}
    for envelope in envelopes:
        if envelope.partition is not None:
            routed[envelope.partition].append(envelope)
        else:
            routed[zlib.crc32(envelope.key) % partitions].append(envelope)
    return routed
