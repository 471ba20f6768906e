"""``operators/async_chain.py``: whatever order the calls of started messages complete in, a message's
released outputs are exactly a synchronous graph's, in its order (a call's outputs in the call's place,
beside deliveries outside the chain), and messages released in any order keep each one's outputs together;
the prefix runs once, when the message starts; a failing operator before the await or a failing call names
the operator; an async operator reached outside a message's start is an error naming it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.errors import MillstreamError
from millstream.model import IncomingMessageEnvelope
from millstream.operators.async_chain import AsyncChains, Recorded
from millstream.operators.graph import AsyncCallError, OperatorError
from millstream.operators.graph_task import TaskGraph
from tests.api.harness import SOURCE, Collector, Coordinator, application, task_graph

A0 = SOURCE.partition(0)


class Delays:
    """Each call sleeps a drawn number of milliseconds (0-3), so calls complete in a drawn order."""

    def __init__(self, drawn: list[int]) -> None:
        self.drawn = drawn
        self.calls: list[Any] = []

    async def sleep(self, *key: int) -> None:
        self.calls.append(key)
        await asyncio.sleep(self.drawn[hash(key) % len(self.drawn)] / 1000)


def chain_graph(delays: Delays) -> TaskGraph:
    """in → ("direct", m); in → flat_map (m % 3 + 1 items) → map_async A → out, and A → filter → flat_map_async
    B (two each) → out; in → ("last", m). A synchronous graph writes, per message: direct, then per item its
    A and (item 1 aside) its two Bs, then last."""

    async def first(item: tuple[int, int]) -> tuple[str, int, int]:
        await delays.sleep(*item, 0)
        return ("A", *item)

    async def second(result: tuple[str, int, int]) -> list[tuple[str, int, int, int]]:
        await delays.sleep(result[1], result[2], 1)
        return [("B", result[1], result[2], copy) for copy in (0, 1)]

    def describe(app: Any) -> None:
        stream = app.input("log.in")
        stream.map(lambda m: ("direct", m)).send_to("log.out")
        awaited = stream.flat_map(lambda m: [(m, i) for i in range(m % 3 + 1)]).map_async(first, name="A")
        awaited.send_to("log.out")
        awaited.filter(lambda r: r[2] != 1).flat_map_async(second, name="B").send_to("log.out")
        stream.map(lambda m: ("last", m)).send_to("log.out")

    return task_graph(application(describe), [A0])


def synchronous(message: int) -> list[Any]:
    outputs: list[Any] = [("direct", message)]
    for i in range(message % 3 + 1):
        outputs.append(("A", message, i))
        if i != 1:
            outputs.extend(("B", message, i, copy) for copy in (0, 1))
    outputs.append(("last", message))
    return [tuple(output) for output in outputs]


def start_all(graph: TaskGraph, chains: AsyncChains, envelopes: list[IncomingMessageEnvelope]) -> list[Recorded]:
    """Start every envelope at once, as the runtime starts a window of them; their recordings."""

    async def start(envelope: IncomingMessageEnvelope) -> Recorded:
        entry = graph.entry(envelope)
        assert entry is not None
        return await chains.run(*entry)

    async def everything() -> list[Recorded]:
        return await asyncio.gather(*(start(envelope) for envelope in envelopes))

    return asyncio.run(everything())


@settings(max_examples=40, deadline=None)
@given(
    messages=st.lists(st.integers(0, 50), min_size=1, max_size=12),
    drawn=st.lists(st.integers(0, 3), min_size=1, max_size=16),
    release=st.randoms(use_true_random=False),
)
def test_released_outputs_are_a_synchronous_graphs_whatever_order_the_calls_complete_in(messages, drawn, release):
    delays = Delays(drawn)
    graph = chain_graph(delays)
    graph.init(None)  # type: ignore[arg-type]
    chains = AsyncChains(graph.graph)
    envelopes = [IncomingMessageEnvelope(A0, str(offset), None, m, offset) for offset, m in enumerate(messages)]
    recorded = start_all(graph, chains, envelopes)
    expected_calls = sum(m % 3 + 1 + sum(1 for i in range(m % 3 + 1) if i != 1) for m in messages)
    assert len(delays.calls) == expected_calls, "each call made once, when its message started"

    order = list(range(len(messages)))
    release.shuffle(order)  # unordered: released as they complete; the checkpoint still waits for the prefix
    collector, coordinator = Collector(), Coordinator()
    for index in order:
        graph.process(envelopes[index], collector, coordinator, recorded[index])
    written = [tuple(envelope.message) for envelope in collector.to("log.out")]
    assert written == [output for index in order for output in synchronous(messages[index])]
    timestamps = [envelope.timestamp for envelope in collector.to("log.out")]
    assert timestamps == [index for index in order for _ in synchronous(messages[index])], "event time kept"


def failing_graph(fail_before: bool) -> tuple[TaskGraph, AsyncChains]:
    async def lookup(message: int) -> int:
        raise RuntimeError(f"GET /enrich?v={message} answered 500")

    def check(message: int) -> int:
        if fail_before:
            raise ValueError(f"bad {message}")
        return message

    def describe(app: Any) -> None:
        app.input("log.in").map(check, name="check").map_async(lookup, name="lookup")

    graph = task_graph(application(describe), [A0])
    graph.init(None)  # type: ignore[arg-type]
    return graph, AsyncChains(graph.graph)


@pytest.mark.parametrize(
    ("fail_before", "error", "expected"),
    [
        (True, OperatorError, "operator 'check' failed: ValueError: bad 7"),
        (False, AsyncCallError, "map_async 'lookup' failed: RuntimeError: GET /enrich?v=7 answered 500"),
    ],
)
def test_a_failure_before_the_await_or_in_the_call_names_the_operator(fail_before, error, expected):
    graph, chains = failing_graph(fail_before)
    envelope = IncomingMessageEnvelope(A0, "0", None, 7, 0)
    with pytest.raises(error, match=expected.replace("?", r"\?")):
        start_all(graph, chains, [envelope])


def test_an_async_operator_reached_outside_a_messages_start_is_an_error_naming_it():
    graph, _ = failing_graph(False)
    with pytest.raises(MillstreamError, match="map_async 'lookup' got a message outside of a message's processing"):
        graph.graph.impls["check"].downstream[0].process(1, 0)
