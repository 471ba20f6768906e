"""One task's operators and how messages, watermarks and end-of-stream move through them.

Messages flow synchronously from an input down every path. Watermarks follow Samza's rule: an
operator's input watermark is the minimum of the output watermarks of the operators feeding it, it only
advances, and the operator handles it (fires windows, calls ``on_watermark``) *before* passing it on —
so whatever it emits for that watermark reaches downstream operators while their own watermark is still
below it, and is never late there. End-of-stream reaches an operator once all its inputs ended; it is
handled as a last watermark (``MAX_WATERMARK``) followed by ``on_end_of_stream``, then passed on.

A *drained* input (the job drains: ``millstream job drain``) finishes its operators the same way — windows
fire with the final watermark — but only for this run: an operator that finished because an input of it
drained is marked ``drained``, passes a drain (not end-of-stream) on to the intermediate streams it writes,
and saves itself as not ended, at its last finite watermark, so the next run goes on from there.

Only *live* operators exist in a task: those fed by an input of which the task owns a partition. An
operator downstream of a merge of a live and a dead input waits only for the live one (Samza lets
unused operators report the maximum watermark for the same reason), and a task that reads none of the
streams feeding a ``partition_by`` is not one of its producers and sends it no control message.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from millstream.api.application import KV
from millstream.api.specs import (
    AsyncMapSpec,
    FilterSpec,
    FlatMapSpec,
    InputSpec,
    JoinSpec,
    MapSpec,
    MergeSpec,
    OperatorSpec,
    PartitionBySpec,
    SendToSpec,
    SinkSpec,
    StatefulMapSpec,
    StreamJoinSpec,
    WindowSpec,
)
from millstream.api.table import ReadableTable
from millstream.api.task import MessageCollector, TaskContext, TaskCoordinator
from millstream.control.messages import MAX_WATERMARK, MIN_WATERMARK
from millstream.errors import MessageError, MillstreamError
from millstream.model import OutgoingMessageEnvelope, SystemStream


class OperatorError(MessageError):
    """A user function of an operator failed; names the operator (the task adds stream, partition and
    offset). A message's failure, as a task's own exception is: ``task.process.errors`` decides what happens to
    the message (fail naming it, skip, dead-letter), and a repeated one is a deterministic failure."""


def operator_failed(op_id: str, error: BaseException) -> OperatorError:
    failure = OperatorError(f"operator '{op_id}' failed: {type(error).__name__}: {error}")
    failure.__cause__ = error
    return failure


class GraphContext:
    """The collector and coordinator of the task call in progress; rebound before every call."""

    __slots__ = ("collector", "coordinator")

    def __init__(self) -> None:
        self.collector: MessageCollector | None = None
        self.coordinator: TaskCoordinator | None = None

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        assert self.collector is not None, "operators send only during a task call"
        self.collector.send(envelope)


class IntermediateOutput(Protocol):
    """What a ``partition_by`` writes through (the task's side of an intermediate stream)."""

    def send(self, key: Any, value: Any, timestamp: int) -> None: ...

    def watermark(self, watermark: int) -> None: ...

    def end_of_stream(self) -> None: ...

    def drain(self) -> None: ...


class OperatorImpl(ABC):
    """An operator of one task. Subclasses implement ``process`` and, where they have state, the hooks."""

    def __init__(self, spec: OperatorSpec, context: GraphContext) -> None:
        self.spec = spec
        self.op_id = spec.op_id
        self.context = context
        self.upstream: list[OperatorImpl] = []
        self.downstream: list[OperatorImpl] = []
        self.input_watermark = MIN_WATERMARK
        self.output_watermark = MIN_WATERMARK
        self.ended = False
        self.drained = False
        """Ended because an input drained: ended for this run only (see the module docstring)."""
        self.last_finite_watermark = MIN_WATERMARK
        function = spec.function
        self._on_watermark = getattr(function, "on_watermark", None)
        self._on_end_of_stream = getattr(function, "on_end_of_stream", None)

    @property
    def state_key(self) -> str:
        return self.op_id

    def init(self, task_context: TaskContext) -> None:
        init = getattr(self.spec.function, "init", None)
        if callable(init):
            init(task_context)

    def close(self) -> None:
        close = getattr(self.spec.function, "close", None)
        if callable(close):
            close()

    @abstractmethod
    def process(self, message: Any, timestamp: int) -> None:
        """Handle one message arriving from upstream; emit downstream as the operator's semantics say."""

    def emit(self, message: Any, timestamp: int) -> None:
        for downstream in self.downstream:
            downstream.process(message, timestamp)

    def handle_watermark(self, watermark: int) -> None:
        """React to a new input watermark before it moves on; the default runs the user's hook."""
        if self._on_watermark is not None:
            results = self.call(self._on_watermark, watermark)
            self.emit_results(results, self._hook_timestamp(watermark))

    def handle_end_of_stream(self) -> None:
        if self._on_end_of_stream is not None:
            results = self.call(self._on_end_of_stream)
            self.emit_results(results, self._hook_timestamp(MAX_WATERMARK))

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Call a user function; its failure becomes an ``OperatorError`` naming this operator."""
        try:
            return fn(*args)
        except OperatorError:
            raise
        except Exception as error:
            raise operator_failed(self.op_id, error) from error

    def emit_results(self, results: Iterable[Any] | None, timestamp: int) -> None:
        for result in results or ():
            self.emit(result, timestamp)

    def _hook_timestamp(self, watermark: int) -> int:
        """Event time of hook output: the watermark that released it, or the last finite one, so it is
        at or above every downstream watermark."""
        if watermark < MAX_WATERMARK:
            return watermark
        return max(self.last_finite_watermark, 0)

    def upstream_advanced(self) -> None:
        if not self.ended and self.upstream:
            self.advance(min(upstream.output_watermark for upstream in self.upstream))

    def advance(self, watermark: int) -> None:
        """Raise the input watermark (never lowers it), handle it, pass it downstream."""
        if self.ended or watermark <= self.input_watermark:
            return
        self.input_watermark = watermark
        self.handle_watermark(watermark)
        if watermark < MAX_WATERMARK:
            self.last_finite_watermark = watermark
        if watermark > self.output_watermark:
            self.output_watermark = watermark
            for downstream in self.downstream:
                downstream.upstream_advanced()

    def upstream_ended(self) -> None:
        if not self.ended and all(upstream.ended for upstream in self.upstream):
            self.finish()

    def finish(self) -> None:
        """End-of-stream: a last watermark, the end-of-stream hook, then downstream."""
        if self.ended:
            return
        self.drained = self.drained or any(upstream.drained for upstream in self.upstream)
        if self.input_watermark < MAX_WATERMARK:
            self.input_watermark = MAX_WATERMARK
            self.handle_watermark(MAX_WATERMARK)
        self.handle_end_of_stream()
        self.ended = True
        self.output_watermark = MAX_WATERMARK
        for downstream in self.downstream:
            downstream.upstream_advanced()
            downstream.upstream_ended()

    def snapshot(self) -> dict[str, Any]:
        if self.drained:  # as before the drain: the next run goes on from the last finite watermark
            finite = self.last_finite_watermark
            return {"in": finite, "out": finite, "ended": False, "finite": finite}
        return {
            "in": self.input_watermark,
            "out": self.output_watermark,
            "ended": self.ended,
            "finite": self.last_finite_watermark,
        }

    def restore(self, document: Mapping[str, Any]) -> None:
        self.input_watermark = int(document["in"])
        self.output_watermark = int(document["out"])
        self.ended = bool(document["ended"])
        self.last_finite_watermark = int(document.get("finite", MIN_WATERMARK))


class InputImpl(OperatorImpl):
    """A source or intermediate stream's entry into the graph; its watermark is set by the task."""

    def __init__(self, spec: OperatorSpec, context: GraphContext, stream: SystemStream, state_key: str) -> None:
        super().__init__(spec, context)
        self.stream = stream
        self._state_key = state_key

    @property
    def state_key(self) -> str:
        return self._state_key

    def init(self, task_context: TaskContext) -> None:
        pass

    def close(self) -> None:
        pass

    def process(self, message: Any, timestamp: int) -> None:
        for downstream in self.downstream:
            downstream.process(message, timestamp)


class MapImpl(OperatorImpl):
    def __init__(self, spec: MapSpec, context: GraphContext) -> None:
        super().__init__(spec, context)
        self.fn = spec.fn

    def process(self, message: Any, timestamp: int) -> None:
        try:
            result = self.fn(message)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        for downstream in self.downstream:
            downstream.process(result, timestamp)


class FilterImpl(OperatorImpl):
    def __init__(self, spec: FilterSpec, context: GraphContext) -> None:
        super().__init__(spec, context)
        self.fn = spec.fn

    def process(self, message: Any, timestamp: int) -> None:
        try:
            keep = self.fn(message)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        if keep:
            for downstream in self.downstream:
                downstream.process(message, timestamp)


class FlatMapImpl(OperatorImpl):
    def __init__(self, spec: FlatMapSpec, context: GraphContext) -> None:
        super().__init__(spec, context)
        self.fn = spec.fn

    def process(self, message: Any, timestamp: int) -> None:
        try:
            results = list(self.fn(message) or ())
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        for result in results:
            for downstream in self.downstream:
                downstream.process(result, timestamp)


class AsyncMapImpl(OperatorImpl):
    """``map_async`` / ``flat_map_async``. Messages reach it only while their processing starts, through
    the edges ``operators.async_chain`` puts in front of it: the task awaits ``call`` there and records what
    its results lead to, to be delivered when the message is released, so every operator after it sees what
    a synchronous map would have produced, in the same order."""

    def __init__(self, spec: AsyncMapSpec, context: GraphContext) -> None:
        super().__init__(spec, context)
        self.async_spec = spec

    def init(self, task_context: TaskContext) -> None:
        """The function's ``init`` / ``close`` may be ``async def``: awaited on the container's loop."""
        from millstream.runtime.async_tasks import run_hook

        init = getattr(self.async_spec.fn, "init", None)
        if callable(init):
            run_hook(init(task_context))

    def close(self) -> None:
        from millstream.runtime.async_tasks import run_hook

        close = getattr(self.async_spec.fn, "close", None)
        if callable(close):
            run_hook(close())

    async def call(self, message: Any) -> list[Any]:
        """Await the user's function for ``message``; its results as a list (one item unless flat)."""
        spec = self.async_spec
        timeout_ms = spec.timeout_ms
        timeout = asyncio.timeout(timeout_ms / 1000 if timeout_ms is not None else None)
        try:
            async with timeout:
                result = await spec.fn(message)
        except TimeoutError as error:
            if timeout.expired():
                raise OperatorTimeoutError(
                    f"{spec.kind} '{self.op_id}' did not complete within timeout_ms={timeout_ms}"
                ) from None
            raise self._failed(error) from error  # the function's own timeout, not timeout_ms
        except Exception as error:
            raise self._failed(error) from error
        return list(result or ()) if spec.flat else [result]

    def _failed(self, error: Exception) -> AsyncCallError:
        if isinstance(error, AsyncCallError):  # a call awaiting another operator's: already named
            return error
        return AsyncCallError(f"{self.async_spec.kind} '{self.op_id}' failed: {type(error).__name__}: {error}")

    def process(self, message: Any, timestamp: int) -> None:
        raise MillstreamError(f"{self.async_spec.kind} '{self.op_id}' is reached only through the task's async chains")


class AsyncCallError(MessageError):
    """A ``map_async`` call (or a remote join's lookup) raised; names the operator and the call's error (the
    runtime adds the task, stream, partition and offset). A message's failure: ``task.process.errors``
    decides what happens to it, as for a task's own exception."""


class OperatorTimeoutError(TimeoutError):
    """A ``map_async`` call outlived its ``timeout_ms``; the message fails under ``task.process.errors``."""


class MergeImpl(OperatorImpl):
    def process(self, message: Any, timestamp: int) -> None:
        for downstream in self.downstream:
            downstream.process(message, timestamp)


class JoinImpl(OperatorImpl):
    def __init__(self, spec: JoinSpec, context: GraphContext) -> None:
        super().__init__(spec, context)
        self.join = spec
        self.table: ReadableTable | None = None

    def init(self, task_context: TaskContext) -> None:
        self.table = self.join.table.build(task_context)
        super().init(task_context)

    def close(self) -> None:
        super().close()
        if self.table is not None:
            self.table.close()

    def process(self, message: Any, timestamp: int) -> None:
        assert self.table is not None
        try:
            record = self.table.get(self.join.key_fn(message))
            if record is None and self.join.how == "inner":
                return
            result = self.join.joiner(message, record)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        self.emit(result, timestamp)


class SendToImpl(OperatorImpl):
    def __init__(self, spec: SendToSpec, context: GraphContext) -> None:
        super().__init__(spec, context)
        self.stream = spec.output.system_stream
        self.key_fn = spec.key_fn
        self.sent = 0

    def process(self, message: Any, timestamp: int) -> None:
        if isinstance(message, KV):
            key, value = message.key, message.value
        else:
            key, value = (self.call(self.key_fn, message) if self.key_fn else None), message
        self.context.send(OutgoingMessageEnvelope(self.stream, value, key, timestamp=timestamp))
        self.sent += 1


class SinkImpl(OperatorImpl):
    def __init__(self, spec: SinkSpec, context: GraphContext) -> None:
        super().__init__(spec, context)
        self.fn = spec.fn

    def process(self, message: Any, timestamp: int) -> None:
        try:
            self.fn(message, self.context.collector, self.context.coordinator)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error

    def emit_results(self, results: Iterable[Any] | None, timestamp: int) -> None:
        for result in results or ():
            self.process(result, timestamp)


class PartitionByImpl(OperatorImpl):
    """The producing side of a ``partition_by``: user messages and control messages into the stream."""

    def __init__(self, spec: PartitionBySpec, context: GraphContext, output: IntermediateOutput) -> None:
        super().__init__(spec, context)
        self.key_fn = spec.key_fn
        self.value_fn = spec.value_fn
        self.output = output

    def init(self, task_context: TaskContext) -> None:
        pass

    def close(self) -> None:
        pass

    def process(self, message: Any, timestamp: int) -> None:
        try:
            key = self.key_fn(message)
            value = self.value_fn(message) if self.value_fn is not None else message
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        self.output.send(key, value, timestamp)

    def handle_watermark(self, watermark: int) -> None:
        if watermark < MAX_WATERMARK:  # the end-of-stream that follows says more
            self.output.watermark(watermark)

    def handle_end_of_stream(self) -> None:
        if self.drained:
            self.output.drain()
        else:
            self.output.end_of_stream()


StateFactory = Callable[[str], Any]


def _build_impl(
    spec: OperatorSpec,
    context: GraphContext,
    state_factory: StateFactory,
    intermediate_outputs: Mapping[str, IntermediateOutput],
) -> OperatorImpl:
    """The operator of ``spec``; stateful ones get their state from ``state_factory(op_id)``."""
    from millstream.api.windows import SessionWindow
    from millstream.operators.keyed import StatefulMapImpl
    from millstream.operators.sessions import SessionWindowImpl
    from millstream.operators.stream_join import StreamJoinImpl
    from millstream.operators.windows import WindowImpl

    stateless: dict[type[OperatorSpec], Callable[[Any, GraphContext], OperatorImpl]] = {
        MapSpec: MapImpl,
        AsyncMapSpec: AsyncMapImpl,
        FilterSpec: FilterImpl,
        FlatMapSpec: FlatMapImpl,
        MergeSpec: MergeImpl,
        JoinSpec: JoinImpl,
        SendToSpec: SendToImpl,
        SinkSpec: SinkImpl,
    }
    build = stateless.get(type(spec))
    if build is not None:
        return build(spec, context)
    if isinstance(spec, WindowSpec):
        if isinstance(spec.window, SessionWindow):
            return SessionWindowImpl(spec, context, state_factory(spec.op_id))
        return WindowImpl(spec, context, state_factory(spec.op_id))
    if isinstance(spec, StatefulMapSpec):
        return StatefulMapImpl(spec, context, state_factory(spec.op_id))
    if isinstance(spec, StreamJoinSpec):
        return StreamJoinImpl(spec, context, state_factory(spec.op_id))
    if isinstance(spec, PartitionBySpec):
        return PartitionByImpl(spec, context, intermediate_outputs[spec.op_id])
    raise MillstreamError(f"operator {spec.op_id}: unknown kind {type(spec).__name__}")


class OperatorGraph:
    """The live operators of one task for a run set, built from its specs (see the module docstring)."""

    def __init__(
        self,
        operators: Iterable[OperatorSpec],
        source_inputs: Mapping[str, tuple[InputSpec, SystemStream]],
        intermediate_inputs: Mapping[str, tuple[PartitionBySpec, SystemStream]],
        intermediate_outputs: Mapping[str, IntermediateOutput],
        context: GraphContext,
        state_factory: StateFactory,
    ) -> None:
        """``source_inputs`` maps input op ids, ``intermediate_inputs`` partition_by op ids, to the streams
        this task owns partitions of; ``intermediate_outputs`` gives each produced ``partition_by`` its
        writer."""
        self.context = context
        self.inputs: dict[SystemStream, InputImpl] = {}
        self.impls: dict[str, OperatorImpl] = {}
        consumed: dict[str, InputImpl] = {}
        for op_id, (input_spec, stream) in source_inputs.items():
            source = InputImpl(input_spec, context, stream, op_id)
            self.inputs[stream] = source
            self.impls[op_id] = source
        for op_id, (partition_spec, stream) in intermediate_inputs.items():
            intermediate = InputImpl(partition_spec, context, stream, f"{op_id}#input")
            self.inputs[stream] = consumed[op_id] = intermediate
        from millstream.operators.stream_join import StreamJoinImpl

        self.operators: list[OperatorImpl] = list(self.inputs.values())
        for spec in operators:
            feeding_impls = [
                (consumed if isinstance(feeding, PartitionBySpec) else self.impls).get(feeding.op_id)
                for feeding in spec.inputs
            ]
            upstream = [found for found in feeding_impls if found is not None]
            if not upstream:
                continue
            impl = _build_impl(spec, context, state_factory, intermediate_outputs)
            impl.upstream = upstream
            for side, source_impl in enumerate(feeding_impls):
                if source_impl is None:
                    continue
                target = impl.side(side) if isinstance(impl, StreamJoinImpl) else impl
                source_impl.downstream.append(target)
            self.impls[spec.op_id] = impl
            self.operators.append(impl)

    def init(self, task_context: TaskContext) -> None:
        for impl in self.operators:
            impl.init(task_context)

    def close(self) -> None:
        for impl in self.operators:
            impl.close()

    def snapshot(self) -> dict[str, Any]:
        return {impl.state_key: impl.snapshot() for impl in self.operators}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        for impl in self.operators:
            document = snapshot.get(impl.state_key)
            if document is not None:
                impl.restore(document)

    def live_partition_bys(self) -> list[str]:
        return [impl.op_id for impl in self.operators if isinstance(impl, PartitionByImpl)]
