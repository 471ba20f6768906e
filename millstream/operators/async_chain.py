"""Async operators anywhere after a per-message chain: what runs before the await, what at the release.

A message of an ``AsyncOperatorGraphTask`` crosses the graph in two phases.

**When the runtime starts it** (in offset order, up to ``task.max.concurrency`` messages in flight), the
*prefix* runs at once: every operator upstream of an async operator (``map``, ``filter``, ``flat_map``,
``merge``, a join with a local table, and async operators themselves). Each message that reaches an async
operator becomes a *call*; the calls of one message are awaited together, and what each returns goes on
through the operators after it in the same way — a chain of async operators is a chain of such stages.
Whatever a prefix operator (or a call's result) hands to an operator *outside* the prefix is not delivered
but *recorded*, in the order a synchronous graph would have delivered it: a call's outputs take the call's
place in the recording, so the order does not depend on which call completed first.

**When the runtime releases it** (in offset order per partition when ordered, as it completes otherwise),
the task makes the recorded deliveries, in that order. Every operator after the prefix — windows, stateful
maps, stream joins, outputs, ``partition_by``\\ s — therefore sees exactly what a synchronous graph would
give it, and watermarks, state and the offsets a checkpoint covers move only at the release.

Why the prefix must be stateless and per message: it runs before the release, for a message a crash may
then replay, so an operator with state there would count that message twice; and an operator that emits at
a watermark or a timer (a window, a function's ``on_watermark`` hook) has no message whose processing could
await the call. ``MessageStream`` refuses both when the application is described; ``AsyncChains`` checks
again for a graph built otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from millstream.errors import MillstreamError
from millstream.operators.graph import (
    AsyncMapImpl,
    FilterImpl,
    FlatMapImpl,
    InputImpl,
    JoinImpl,
    MapImpl,
    MergeImpl,
    OperatorGraph,
    OperatorImpl,
)

PREFIX_IMPLS = (InputImpl, MapImpl, FilterImpl, FlatMapImpl, MergeImpl, JoinImpl, AsyncMapImpl)
"""The operators that may run before an await: per message and without state."""


class Call:
    """A message that reached an async operator while its message started; ``outputs`` records what the
    call's results led to (filled once it completed)."""

    __slots__ = ("impl", "message", "outputs", "timestamp")

    def __init__(self, impl: AsyncMapImpl, message: Any, timestamp: int) -> None:
        self.impl = impl
        self.message = message
        self.timestamp = timestamp
        self.outputs: list[Any] = []


class Recorded:
    """What a started message's prefix produced: its event time and the deliveries to make at its release
    (``(operator, message, timestamp)`` tuples and ``Call``\\ s, in a synchronous graph's order)."""

    __slots__ = ("entries", "timestamp")

    def __init__(self, timestamp: int, entries: list[Any]) -> None:
        self.timestamp = timestamp
        self.entries = entries

    def deliver(self) -> None:
        """Make the recorded deliveries, a call's outputs in its place."""
        _deliver(self.entries)


class DirectRecorded(Recorded):
    """A message whose input one async operator follows directly and no other follows: its call's results,
    each to ``targets`` (what a recording of them would hold, without building one)."""

    __slots__ = ("targets",)

    def __init__(self, timestamp: int, results: list[Any], targets: list[OperatorImpl]) -> None:
        self.timestamp = timestamp  # not through super(): one call less on the hot path
        self.entries = results
        self.targets = targets

    def deliver(self) -> None:
        timestamp, targets = self.timestamp, self.targets
        for result in self.entries:
            for target in targets:
                target.process(result, timestamp)


def _deliver(entries: list[Any]) -> None:
    for entry in entries:
        if type(entry) is Call:
            _deliver(entry.outputs)
        else:
            target, message, timestamp = entry
            target.process(message, timestamp)


class _Recorder:
    """Where the prefix's deliveries go while a message starts; None outside (then they are delivered)."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[Any] | None = None


class _Edge(OperatorImpl):
    """An edge out of the prefix, in the upstream operator's ``downstream``: watermarks and end-of-stream
    pass through to ``target`` at once (they move at releases and timers, never while a message starts)."""

    def __init__(self, target: OperatorImpl, recorder: _Recorder) -> None:
        super().__init__(target.spec, target.context)
        self.target = target
        self.recorder = recorder

    def process(self, message: Any, timestamp: int) -> None:
        entries = self.recorder.entries
        if entries is None:  # outside a start: a hook's output, delivered as a synchronous graph would
            self.target.process(message, timestamp)
        else:
            entries.append((self.target, message, timestamp))

    def upstream_advanced(self) -> None:
        self.target.upstream_advanced()

    def upstream_ended(self) -> None:
        self.target.upstream_ended()


class _Await(_Edge):
    """An edge into an async operator: while a message starts, a ``Call`` to await."""

    def __init__(self, target: AsyncMapImpl, recorder: _Recorder) -> None:
        super().__init__(target, recorder)
        self.call_target = target

    def process(self, message: Any, timestamp: int) -> None:
        entries = self.recorder.entries
        if entries is None:
            raise MillstreamError(
                f"{self.call_target.async_spec.kind} '{self.op_id}' got a message outside of a message's "
                "processing (from a window or a hook), which it cannot await"
            )
        entries.append(Call(self.call_target, message, timestamp))


class AsyncChains:
    """The prefix of one task's graph and how a message runs through it (see the module docstring)."""

    def __init__(self, graph: OperatorGraph) -> None:
        asyncs = [impl for impl in graph.operators if isinstance(impl, AsyncMapImpl)]
        prefix = _ancestors(asyncs)
        for impl in prefix:
            if not isinstance(impl, PREFIX_IMPLS):
                raise MillstreamError(
                    f"operator '{impl.op_id}' ({impl.spec.kind}) cannot run before an async operator: it keeps "
                    "state or emits at watermarks, not once per message"
                )
        self.recorder = _Recorder()
        self.entries = frozenset(impl for impl in prefix if isinstance(impl, InputImpl))
        """The inputs whose messages start with a run through the prefix."""
        for impl in {*prefix, *asyncs}:
            impl.downstream = [self._edge(target, prefix) for target in impl.downstream]
        self._direct: dict[OperatorImpl, tuple[AsyncMapImpl, list[OperatorImpl]]] = {}
        """Inputs followed directly by one async operator, itself followed by no other: their messages need
        no recording until the call returned (the common case, kept as cheap as before chains)."""
        for impl in self.entries:
            if len(impl.downstream) == 1 and isinstance(awaited := impl.downstream[0], _Await):
                edges = [edge for edge in awaited.call_target.downstream if type(edge) is _Edge]
                if len(edges) == len(awaited.call_target.downstream):
                    self._direct[impl] = (awaited.call_target, [edge.target for edge in edges])

    def direct(self, entry: OperatorImpl) -> tuple[AsyncMapImpl, list[OperatorImpl]] | None:
        """When one async operator follows the input ``entry`` directly and no other follows it: that operator
        and where its results go (then a message's recording is its results to those, in order)."""
        return self._direct.get(entry)

    def _edge(self, target: OperatorImpl, prefix: set[OperatorImpl]) -> OperatorImpl:
        if isinstance(target, AsyncMapImpl):
            return _Await(target, self.recorder)
        if target in prefix:
            return target  # runs while the message starts
        return _Edge(target, self.recorder)

    async def run(self, entry: OperatorImpl, message: Any, timestamp: int) -> Recorded:
        """Run ``message`` through the prefix from its input ``entry``, awaiting its calls stage by stage;
        what to deliver at its release."""
        direct = self._direct.get(entry)
        if direct is not None:
            impl, targets = direct
            return DirectRecorded(timestamp, await impl.call(message), targets)
        entries: list[Any] = []
        self._record(entries, entry, (message,), timestamp)
        calls = [item for item in entries if type(item) is Call]
        while calls:
            if len(calls) == 1:
                call = calls[0]
                results = [await call.impl.call(call.message)]
            else:
                results = await _await_all(calls)
            stage: list[Call] = []
            for call, outputs in zip(calls, results, strict=True):
                self._record(call.outputs, call.impl, outputs, call.timestamp)
                stage.extend(item for item in call.outputs if type(item) is Call)
            calls = stage
        return Recorded(timestamp, entries)

    def _record(self, entries: list[Any], impl: OperatorImpl, messages: Iterable[Any], timestamp: int) -> None:
        """``impl`` hands ``messages`` downstream with the deliveries out of the prefix going to ``entries``.
        Synchronous, so no other message's start can interleave."""
        recorder = self.recorder
        recorder.entries = entries
        try:
            for message in messages:
                for downstream in impl.downstream:
                    downstream.process(message, timestamp)
        finally:
            recorder.entries = None


def _ancestors(impls: list[AsyncMapImpl]) -> set[OperatorImpl]:
    """Every operator upstream of ``impls`` (async ones included when they feed another)."""
    found: set[OperatorImpl] = set()
    stack: list[OperatorImpl] = [upstream for impl in impls for upstream in impl.upstream]
    while stack:
        impl = stack.pop()
        if impl not in found:
            found.add(impl)
            stack.extend(impl.upstream)
    return found


async def _await_all(calls: list[Call]) -> list[list[Any]]:
    """The results of ``calls``, awaited together; the first failure fails the message and cancels the rest."""
    tasks = [asyncio.ensure_future(call.impl.call(call.message)) for call in calls]
    try:
        return [await task for task in tasks]
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
            elif not task.cancelled():
                task.exception()  # retrieved: one failure is the message's, the others are not logged apart
