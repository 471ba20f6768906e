"""Stream-stream joins: pairs of equal keys within an interval of event time, whatever the arrival order."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.api.application import InputDescriptor, StreamApplicationDescriptor
from millstream.api.errors import ApplicationError
from millstream.api.table import InMemoryTableDescriptor
from millstream.model import SystemStream
from millstream.operators.stream_join import StreamJoinImpl
from tests.api.harness import Driver, application, task_graph

LEFT, RIGHT = SystemStream("log", "left"), SystemStream("log", "right")
L0, R0 = LEFT.partition(0), RIGHT.partition(0)
WITHIN = 5


def joined_app(how="inner", lateness=0):
    def describe(app):
        left = app.input(InputDescriptor("log.left", timestamp=lambda m: m["ts"]))
        right = app.input(InputDescriptor("log.right", timestamp=lambda m: m["ts"]))
        left.join(
            right,
            key=lambda m: m["k"],
            other_key=lambda m: m["k"],
            joiner=lambda a, b: (a["n"], b["n"] if b else None),
            within_ms=WITHIN,
            allowed_lateness_ms=lateness,
            how=how,
            name="pairs",
        ).send_to("log.out")

    return application(describe)


def outputs(driver: Driver) -> list:
    return [envelope.message for envelope in driver.collector.to("log.out")]


def send(driver: Driver, side: str, key: str, ts: int, n: int) -> None:
    driver.source(L0 if side == "L" else R0, {"k": key, "ts": ts, "n": n}, 0)


def reference_join(events, within: int, how: str = "inner") -> Counter:
    """Every (left n, right n) of equal keys at most ``within`` apart; unmatched lefts with None for "left"."""
    lefts = [e for e in events if e[0] == "L"]
    rights = [e for e in events if e[0] == "R"]
    pairs: Counter = Counter()
    for _, key, ts, n in lefts:
        matches = [m for _, k, t, m in rights if k == key and abs(t - ts) <= within]
        pairs.update((n, m) for m in matches)
        if how == "left" and not matches:
            pairs[(n, None)] += 1
    return pairs


def test_a_message_joins_every_counterpart_of_its_key_within_the_interval_in_either_order():
    driver = Driver(task_graph(joined_app(), [L0, R0]))
    send(driver, "L", "a", 10, 1)
    send(driver, "R", "a", 15, 2)  # 5 apart: a match
    send(driver, "R", "b", 10, 3)
    send(driver, "R", "a", 16, 4)  # 6 apart: none
    send(driver, "L", "a", 12, 5)  # matches both rights
    assert outputs(driver) == [(1, 2), (5, 2), (5, 4)]
    assert [e.timestamp for e in driver.collector.sent] == [15, 15, 16]


def test_buffers_are_purged_past_the_interval_and_late_messages_beyond_the_lateness_are_dropped_and_counted():
    driver = Driver(task_graph(joined_app(lateness=10), [L0, R0]))
    send(driver, "L", "a", 100, 1)
    send(driver, "R", "b", 100, 2)
    driver.tick()  # watermark 100
    send(driver, "R", "a", 95, 3)  # late, within the lateness: matches
    send(driver, "R", "a", 89, 4)  # older than the watermark minus the lateness: dropped
    join = driver.graph.graph.impls["pairs"]
    assert isinstance(join, StreamJoinImpl) and join.late_dropped == 1
    assert outputs(driver) == [(1, 3)]
    send(driver, "L", "x", 200, 5)
    send(driver, "R", "x", 200, 6)
    driver.tick()  # watermark 200: everything before 185 purged
    assert len(join.state) == 2, "only x's messages are left"


def test_a_purge_keeps_the_messages_of_the_key_that_a_message_within_the_lateness_may_still_match():
    driver = Driver(task_graph(joined_app(lateness=10), [L0, R0]))
    send(driver, "L", "a", 0, 1)
    send(driver, "L", "a", 20, 2)
    send(driver, "L", "x", 28, 3)
    send(driver, "R", "x", 28, 4)
    driver.tick()  # watermark 28: a@0 expired at 15; a@20 may still meet a right message at 18..25
    send(driver, "R", "a", 24, 5)
    assert outputs(driver) == [(3, 4), (2, 5)]


def test_a_left_join_emits_unmatched_left_messages_once_their_interval_and_lateness_passed():
    driver = Driver(task_graph(joined_app(how="left", lateness=2), [L0, R0]))
    send(driver, "L", "a", 10, 1)
    send(driver, "L", "b", 10, 2)
    send(driver, "R", "a", 12, 3)
    send(driver, "L", "c", 30, 4)
    send(driver, "R", "c", 30, 5)
    driver.tick()  # watermark 30: a and b expire at 17
    assert outputs(driver) == [(1, 3), (4, 5), (2, None)]
    assert (driver.collector.sent[-1].timestamp or 0) >= 17
    driver.end(L0)
    driver.end(R0)
    assert outputs(driver)[3:] == []


def test_join_buffers_and_purge_index_survive_a_restart():
    before = Driver(task_graph(joined_app(how="left"), [L0, R0]))
    send(before, "L", "a", 10, 1)
    send(before, "R", "a", 10, 2)
    send(before, "L", "b", 11, 3)
    snapshot = before.checkpoint()
    assert snapshot is not None
    after = Driver(task_graph(joined_app(how="left"), [L0, R0]))
    after.graph.restore(snapshot)
    after.offsets = dict(before.offsets)
    send(after, "R", "a", 14, 4)
    send(after, "L", "z", 50, 5)
    send(after, "R", "z", 50, 6)
    after.tick()
    assert outputs(after) == [(1, 4), (5, 6), (3, None)]


def test_a_join_is_refused_when_its_arguments_do_not_fit_a_stream_or_a_table_naming_it():
    app = StreamApplicationDescriptor()
    left, right = app.input("log.left"), app.input("log.right")
    with pytest.raises(
        ApplicationError, match=r"join 'j' of input-log.left with input-log.right: within_ms .* must be >= 0"
    ):
        left.join(right, joiner=lambda a, b: a, name="j")
    with pytest.raises(ApplicationError, match="how must be 'inner' or 'left', not 'outer'"):
        left.join(right, joiner=lambda a, b: a, within_ms=1, how="outer")
    with pytest.raises(ApplicationError, match="join with table 'users': other_key, within_ms"):
        left.join(InMemoryTableDescriptor("users", {}), key=str, joiner=lambda a, b: a, within_ms=5)


DISORDER = 20
events_strategy = st.lists(
    st.tuples(st.sampled_from("LR"), st.sampled_from("ab"), st.integers(0, 100), st.integers(0, DISORDER)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    generated=events_strategy,
    ticks=st.lists(st.booleans(), min_size=40, max_size=40),
    how=st.sampled_from(["inner", "left"]),
)
def test_the_join_equals_a_plain_python_join_over_any_order_of_late_and_out_of_order_events(generated, ticks, how):
    """Each event arrives up to ``DISORDER`` ms of event time late (ordered by time plus its delay), so
    buffers are purged while later events still arrive; with that much lateness nothing is dropped."""
    events = [(side, key, ts, n) for n, (side, key, ts, _) in enumerate(generated)]
    arrival = [events[n] for n in sorted(range(len(events)), key=lambda n: generated[n][2] + generated[n][3])]
    driver = Driver(task_graph(joined_app(how=how, lateness=DISORDER), [L0, R0]))
    for event, tick in zip(arrival, ticks, strict=False):
        send(driver, *event)
        if tick:
            driver.tick()
    join = driver.graph.graph.impls["pairs"]
    assert isinstance(join, StreamJoinImpl) and join.late_dropped == 0
    driver.end(L0)
    driver.end(R0)
    assert Counter(outputs(driver)) == reference_join(events, WITHIN, how)
