"""``MessageStream``: the operators of the high-level API, each returning the stream it produces.

Every message flows with its event time (the input's timestamp, kept through stateless operators), so
windows downstream of any chain of operators and repartitionings work in event time.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from millstream.api.errors import ApplicationError
from millstream.api.remote_table import RemoteJoin, RemoteTable
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

if TYPE_CHECKING:
    from millstream.api.application import OutputDescriptor, StreamApplicationDescriptor
    from millstream.api.state import ValueState
    from millstream.api.table import TableDescriptor
    from millstream.api.windows import Aggregator, WindowDefinition


class MessageStream:
    """A stream of messages inside an application; build the graph by chaining operators."""

    def __init__(self, app: StreamApplicationDescriptor, spec: OperatorSpec) -> None:
        self.app = app
        self.spec = spec

    def map(self, fn: Callable[[Any], Any], *, name: str | None = None) -> MessageStream:
        """One output per message: ``fn(message)``."""
        return self._then(MapSpec, "map", name, fn=fn)

    def filter(self, fn: Callable[[Any], bool], *, name: str | None = None) -> MessageStream:
        """The messages for which ``fn(message)`` is true."""
        return self._then(FilterSpec, "filter", name, fn=fn)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None) -> MessageStream:
        """Zero or more outputs per message: each item of ``fn(message)``."""
        return self._then(FlatMapSpec, "flat_map", name, fn=fn)

    def map_async(
        self,
        fn: Callable[[Any], Awaitable[Any]],
        *,
        concurrency: int = 10,
        ordered: bool = True,
        timeout_ms: int | None = None,
        name: str | None = None,
    ) -> MessageStream:
        """One output per message: ``await fn(message)``, ``fn`` an ``async def`` (a call to another service).

        Up to ``concurrency`` messages of a task are in flight (it sets ``task.max.concurrency``). With
        ``ordered`` (the default) results go downstream in offset order per partition; without, as each
        completes (order within a partition may change; event time and windows still apply). Either way a
        checkpoint covers only the completed prefix of each partition, so a crash loses nothing. A call past
        ``timeout_ms`` is cancelled and fails its message, as a call that raises, under
        ``task.process.errors``.

        It may follow any chain of per-message operators without state (``map``, ``filter``, ``flat_map``,
        ``merge``, a join with a local table, other async operators, an input or a ``partition_by``): those run
        once, when the message starts, and the rest of the graph gets their outputs when it is released. After
        a window, a stateful map or a stream join it is refused (they emit at watermarks or keep state a
        replay would count twice): repartition their output (``partition_by``) and put it after that. See the
        Async I/O guide."""
        return self._then_async(fn, False, concurrency, ordered, timeout_ms, name)

    def flat_map_async(
        self,
        fn: Callable[[Any], Awaitable[Iterable[Any]]],
        *,
        concurrency: int = 10,
        ordered: bool = True,
        timeout_ms: int | None = None,
        name: str | None = None,
    ) -> MessageStream:
        """Zero or more outputs per message: each item ``await fn(message)`` returns (see ``map_async``)."""
        return self._then_async(fn, True, concurrency, ordered, timeout_ms, name)

    def _then_async(
        self, fn: Any, flat: bool, concurrency: int, ordered: bool, timeout_ms: int | None, name: str | None
    ) -> MessageStream:
        kind = "flat_map_async" if flat else "map_async"
        label = f"{kind} '{name or kind}'"
        if not (inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)):
            raise ApplicationError(f"{label}: fn must be an async function (async def), not {fn!r}")
        if concurrency < 1:
            raise ApplicationError(f"{label}: concurrency must be >= 1, not {concurrency}")
        if timeout_ms is not None and timeout_ms < 1:
            raise ApplicationError(f"{label}: timeout_ms must be >= 1, not {timeout_ms}")
        _check_prefix(label, self.spec)
        spec = self.app.add(
            AsyncMapSpec,
            kind,
            name,
            inputs=(self.spec,),
            fn=fn,
            flat=flat,
            concurrency=concurrency,
            ordered=ordered,
            timeout_ms=timeout_ms,
        )
        return MessageStream(self.app, spec)

    def map_with_state(
        self,
        fn: Callable[[Any, ValueState], Any],
        *,
        key: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> MessageStream:
        """One output per message: ``fn(message, state)``, ``state`` the ``ValueState`` of ``key(message)``
        (of a ``KV``'s key when ``key`` is None). A running count per user is
        ``stream.map_with_state(lambda m, s: s.set(s.get(0) + 1) or s.get(), key=lambda m: m["user"])``.
        Name it: its state is kept under its name across restarts."""
        return self._then(StatefulMapSpec, "map_with_state", name, fn=fn, key_fn=key)

    def flat_map_with_state(
        self,
        fn: Callable[[Any, ValueState], Iterable[Any]],
        *,
        key: Callable[[Any], Any] | None = None,
        name: str | None = None,
    ) -> MessageStream:
        """Zero or more outputs per message: each item of ``fn(message, state)`` (see ``map_with_state``);
        emitting nothing is how a stateful filter or deduplication is written."""
        return self._then(StatefulMapSpec, "flat_map_with_state", name, fn=fn, key_fn=key, flat=True)

    def merge(self, *others: MessageStream, name: str | None = None) -> MessageStream:
        """The messages of this stream and of ``others``; its watermark is their minimum."""
        return MessageStream.merge_all([self, *others], name=name)

    @staticmethod
    def merge_all(streams: Sequence[MessageStream], *, name: str | None = None) -> MessageStream:
        if not streams:
            raise ApplicationError("merge needs at least one stream")
        app = streams[0].app
        for stream in streams:
            stream._same_app(app)
        spec = app.add(MergeSpec, "merge", name, inputs=tuple(stream.spec for stream in streams))
        return MessageStream(app, spec)

    def partition_by(
        self,
        key: Callable[[Any], Any],
        *,
        name: str,
        value: Callable[[Any], Any] | None = None,
        key_serde: str = "json",
        msg_serde: str = "json",
    ) -> MessageStream:
        """Repartition by ``key(message)`` through an intermediate stream ``<app.name>-<app.id>-<name>``.

        Downstream sees ``KV(key, value(message) or message)``, all messages of a key in one task. The
        serdes (registered serde names) encode key and value in the intermediate stream.
        """
        return self._then(
            PartitionBySpec,
            "partition_by",
            name,
            name=name,
            key_fn=key,
            value_fn=value,
            key_serde=key_serde,
            msg_serde=msg_serde,
        )

    def window(
        self,
        window: WindowDefinition,
        *,
        aggregate: Aggregator,
        key: Callable[[Any], Any] | None = None,
        allowed_lateness_ms: int = 0,
        name: str | None = None,
    ) -> MessageStream:
        """Event-time windows per ``key(message)``; emits a ``WindowPane`` per key and window once the
        watermark reaches the window's end (see ``millstream.api.windows``)."""
        from millstream.api.windows import MergingAggregator, SessionWindow

        if allowed_lateness_ms < 0:
            raise ApplicationError(f"window '{name or 'window'}': allowed_lateness_ms must be >= 0")
        if isinstance(window, SessionWindow) and not isinstance(aggregate, MergingAggregator):
            raise ApplicationError(
                f"window '{name or 'window'}': a session window merges sessions, but aggregator "
                f"{type(aggregate).__name__} has no merge (give Aggregate a merge= function, or make it a "
                "MergingAggregator)"
            )
        return self._then(
            WindowSpec,
            "window",
            name,
            window=window,
            key_fn=key,
            aggregator=aggregate,
            allowed_lateness_ms=allowed_lateness_ms,
        )

    def join(
        self,
        other: TableDescriptor | RemoteTable | MessageStream,
        *,
        key: Callable[[Any], Any] | None = None,
        joiner: Callable[[Any, Any], Any],
        how: str = "inner",
        other_key: Callable[[Any], Any] | None = None,
        within_ms: int | None = None,
        allowed_lateness_ms: int = 0,
        concurrency: int = 10,
        ordered: bool = True,
        timeout_ms: int | None = None,
        name: str | None = None,
    ) -> MessageStream:
        """Join with a table or with another stream.

        With a table: ``joiner(message, table.get(key(message)))``; ``how="inner"`` drops messages without
        a record, ``"left"`` passes them with ``None``.

        With a ``RemoteTable`` (an async lookup join, Flink's lookup join): the lookup is awaited as a
        ``map_async`` would be, with its ``concurrency``, ``ordered`` and ``timeout_ms`` and its guarantees
        (results in offset order per partition, checkpoints over completed messages only); a lookup that
        fails for good fails its message under ``task.process.errors``. Like ``map_async``, it may follow any
        chain of per-message operators without state.

        With a stream (Samza's stream-stream join with a TTL, Flink's interval join):
        ``joiner(message, other_message)`` for every pair with ``key(message) == other_key(other_message)``
        (a ``KV``'s key when a key function is None) whose event times are at most ``within_ms`` apart. Both
        streams must be co-partitioned by that key (each side comes from a ``partition_by``); both sides are
        buffered until the watermark passes ``within_ms + allowed_lateness_ms`` beyond them. Messages older
        than the watermark minus ``allowed_lateness_ms`` are dropped and counted. ``how="left"`` also emits
        ``joiner(message, None)`` for a message of this stream that found no match once its buffer expires.
        """
        if isinstance(other, MessageStream):
            return self._join_stream(other, key, other_key, joiner, how, within_ms, allowed_lateness_ms, name)
        if isinstance(other, RemoteTable):
            if how not in ("inner", "left") or key is None:
                raise ApplicationError(
                    f"join with remote table '{other.table_id}': key= is required and how must be 'inner' or 'left'"
                )
            lookup = RemoteJoin(other, key, joiner, how)
            return self._then_async(lookup, True, concurrency, ordered, timeout_ms, name or f"join_{other.table_id}")
        if how not in ("inner", "left"):
            raise ApplicationError(f"join with table '{other.name}': how must be 'inner' or 'left', not '{how}'")
        if key is None:
            raise ApplicationError(f"join with table '{other.name}': key= is required")
        if other_key is not None or within_ms is not None or allowed_lateness_ms:
            raise ApplicationError(
                f"join with table '{other.name}': other_key, within_ms and allowed_lateness_ms are for joins "
                "with a stream"
            )
        return self._then(JoinSpec, "join", name, table=other, key_fn=key, joiner=joiner, how=how)

    def _join_stream(
        self,
        other: MessageStream,
        key: Callable[[Any], Any] | None,
        other_key: Callable[[Any], Any] | None,
        joiner: Callable[[Any, Any], Any],
        how: str,
        within_ms: int | None,
        allowed_lateness_ms: int,
        name: str | None,
    ) -> MessageStream:
        label = f"join '{name or 'stream_join'}' of {self.spec.op_id} with {other.spec.op_id}"
        other._same_app(self.app)
        if how not in ("inner", "left"):
            raise ApplicationError(f"{label}: how must be 'inner' or 'left', not '{how}'")
        if within_ms is None or within_ms < 0:
            raise ApplicationError(f"{label}: within_ms (the interval of event time a match may span) must be >= 0")
        if allowed_lateness_ms < 0:
            raise ApplicationError(f"{label}: allowed_lateness_ms must be >= 0")
        spec = self.app.add(
            StreamJoinSpec,
            "stream_join",
            name,
            inputs=(self.spec, other.spec),
            key_fn=key,
            other_key_fn=other_key,
            joiner=joiner,
            within_ms=within_ms,
            allowed_lateness_ms=allowed_lateness_ms,
            how=how,
        )
        return MessageStream(self.app, spec)

    def send_to(self, output: OutputDescriptor | str, *, key: Callable[[Any], Any] | None = None) -> None:
        """Write every message to ``output``. A ``KV`` is written as its key and value; otherwise the key
        is ``key(message)``, or none."""
        from millstream.api.application import OutputDescriptor

        descriptor = OutputDescriptor(output) if isinstance(output, str) else output
        self._then(SendToSpec, "send_to", None, output=descriptor, key_fn=key)

    def sink(self, fn: Callable[[Any, Any, Any], None], *, name: str | None = None) -> None:
        """Call ``fn(message, collector, coordinator)`` for every message (Samza's SinkFunction)."""
        self._then(SinkSpec, "sink", name, fn=fn)

    def _then(self, spec_class: type[OperatorSpec], kind: str, op_name: str | None, **fields: Any) -> MessageStream:
        spec = self.app.add(spec_class, kind, op_name, inputs=(self.spec,), **fields)
        return MessageStream(self.app, spec)

    def _same_app(self, app: StreamApplicationDescriptor) -> None:
        if self.app is not app:
            raise ApplicationError(f"stream {self.spec.op_id} belongs to another application")


_PER_MESSAGE = (InputSpec, PartitionBySpec, MapSpec, FilterSpec, FlatMapSpec, MergeSpec, JoinSpec, AsyncMapSpec)
"""What may run before an async operator: once per message, without state (``operators.async_chain``)."""


def _check_prefix(label: str, spec: OperatorSpec) -> None:
    """Refuse an async operator after ``spec`` unless every operator up to its inputs is per message and
    stateless: that prefix runs when a message starts, before the await (see ``operators.async_chain``)."""
    stack, seen = [spec], set()
    while stack:
        upstream = stack.pop()
        if id(upstream) in seen:
            continue
        seen.add(id(upstream))
        if not isinstance(upstream, _PER_MESSAGE):
            raise ApplicationError(
                f"{label}: cannot follow {upstream.kind} '{upstream.op_id}', which emits at watermarks or keeps "
                "state; only per-message operators without state may run before an await (map, filter, "
                "flat_map, merge, a join with a local table, async operators). Repartition its output "
                "(partition_by) and put the async operator after that"
            )
        function = upstream.function
        hooks = [hook for hook in ("on_watermark", "on_end_of_stream") if callable(getattr(function, hook, None))]
        if hooks:
            raise ApplicationError(
                f"{label}: cannot follow {upstream.kind} '{upstream.op_id}', whose function has "
                f"{' and '.join(hooks)}: what those emit has no message to await with"
            )
        if not isinstance(upstream, PartitionBySpec):  # a partition_by starts the stage: its stream is an input
            stack.extend(upstream.inputs)
