"""Watermarks bounded by time: the pacer alone, and the protocol sending, holding back and re-sending
paced watermarks (``millstream.control.pacing``), including under any timing (hypothesis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.control.framing import unframe
from millstream.control.messages import EndOfStreamMessage, WatermarkMessage
from millstream.control.pacing import JITTER, WatermarkPacer
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
from millstream.control.reconciliation import ControlReconciler
from millstream.control.sender import aggregate_partition
from tests.control.test_protocol import A0, AGGREGATE, BY_USER, OUT, SOURCE, decoded
from tests.control.test_reconciliation import FakeClock, control_histories

INTERVAL_MS = 200


def paced_producer(clock: FakeClock, aggregate: bool = False, partitions: int = 3) -> ControlProtocol:
    return ControlProtocol(
        "Partition 0",
        frozenset({A0}),
        sources=[SourceInput(SOURCE, frozenset({A0}), 0)],
        produced=[ProducedStream(OUT, partitions, 2)],
        settings=ProtocolSettings(aggregate=aggregate, watermark_interval_ms=INTERVAL_MS),
        clock=clock,
    )


def watermarks(events: ControlEvents) -> list[int]:
    return sorted({message.timestamp for _, message in decoded(events) if isinstance(message, WatermarkMessage)})


def test_the_pacer_lets_the_first_advance_through_and_holds_the_newest_one_back_until_the_interval_passed():
    pacer: WatermarkPacer[str] = WatermarkPacer(INTERVAL_MS)
    assert pacer.offer("s", 1, 10.0)
    assert not pacer.offer("s", 2, 10.05) and not pacer.offer("s", 3, 10.1)
    assert list(pacer.due(10.15)) == [], "the interval has not passed"
    assert list(pacer.due(10.2)) == [("s", 3)], "only the newest one"
    assert list(pacer.due(10.5)) == [], "nothing held back any more"
    assert pacer.offer("s", 4, 10.4)


def test_an_interval_short_by_the_timers_jitter_counts_as_passed():
    pacer: WatermarkPacer[str] = WatermarkPacer(INTERVAL_MS)
    assert pacer.offer("s", 1, 0.0)
    assert pacer.offer("s", 2, 0.19), "a timer call 10 ms early still sends its watermark"
    assert not pacer.offer("s", 3, 0.19 + 0.17)


def test_the_pacer_keys_are_independent_and_a_dropped_key_sends_nothing_later():
    pacer: WatermarkPacer[str] = WatermarkPacer(INTERVAL_MS)
    assert pacer.offer("a", 1, 0.0) and pacer.offer("b", 1, 0.1)
    assert not pacer.offer("a", 2, 0.1)
    pacer.drop("a")
    assert list(pacer.due(1.0)) == []


def test_a_negative_interval_is_refused():
    with pytest.raises(ValueError, match="-1 ms"):
        WatermarkPacer(-1)


def test_a_producer_sends_a_watermark_at_most_once_per_interval_and_the_timer_sends_the_newest_held_back():
    clock = FakeClock()
    protocol = paced_producer(clock)
    assert watermarks(protocol.on_output_watermark(OUT, 5)) == [5]
    clock.now += 0.05
    assert protocol.on_output_watermark(OUT, 6) is NO_EVENTS
    assert protocol.on_output_watermark(OUT, 7) is NO_EVENTS
    assert protocol.unsaved, "a held-back watermark is part of the snapshot"
    assert watermarks(protocol.on_timer()) == [], "the interval has not passed"
    clock.now += 0.15
    events = protocol.on_timer()
    assert decoded(events) == [(p, WatermarkMessage(7, "Partition 0", 2)) for p in range(3)]
    clock.now += 1
    assert watermarks(protocol.on_timer()) == []


def test_end_of_stream_supersedes_a_held_back_watermark():
    clock = FakeClock()
    protocol = paced_producer(clock)
    protocol.on_output_watermark(OUT, 5)
    protocol.on_output_watermark(OUT, 6)
    protocol.on_output_end_of_stream(OUT)
    clock.now += 1
    assert watermarks(protocol.on_timer()) == []
    assert decoded(protocol.on_flush()) == [(aggregate_partition(OUT.stream, 3), EndOfStreamMessage("Partition 0", 2))]


def test_a_restart_sends_the_watermarks_held_back_at_the_snapshot():
    clock = FakeClock()
    before = paced_producer(clock)
    before.on_output_watermark(OUT, 5)
    before.on_output_watermark(OUT, 9)
    after = paced_producer(clock)
    after.restore(before.snapshot())
    assert watermarks(after.resume()) == [9]
    clock.now += 1
    assert watermarks(after.on_timer()) == [], "sent once"


def test_the_aggregating_task_forwards_at_most_one_watermark_per_interval_and_end_of_stream_at_once():
    clock = FakeClock()
    own = BY_USER.partition(AGGREGATE)
    protocol = ControlProtocol(
        "Partition 0",
        frozenset({own}),
        consumed=[ConsumedStream(BY_USER, 4, frozenset({own}))],
        settings=ProtocolSettings(aggregate=True, watermark_interval_ms=INTERVAL_MS),
        clock=clock,
    )
    protocol.on_control_message(own, WatermarkMessage(7, "t0", 2))
    assert watermarks(protocol.on_control_message(own, WatermarkMessage(8, "t1", 2))) == [7]
    assert protocol.on_control_message(own, WatermarkMessage(9, "t0", 2)).sends == ()
    assert protocol.on_control_message(own, WatermarkMessage(10, "t1", 2)).sends == ()
    clock.now += 0.2
    assert watermarks(protocol.on_timer()) == [9]
    protocol.on_control_message(own, EndOfStreamMessage("t0", 2))
    events = protocol.on_control_message(own, EndOfStreamMessage("t1", 2))
    assert {type(message) for _, message in decoded(events)} == {EndOfStreamMessage}


def test_a_broadcast_consumer_of_the_aggregate_partition_forwards_end_of_stream_but_no_watermark():
    own = BY_USER.partition(AGGREGATE)
    protocol = ControlProtocol("Partition 0", frozenset({own}), consumed=[ConsumedStream(BY_USER, 4, frozenset({own}))])
    assert protocol.on_control_message(own, WatermarkMessage(7, "t0", 1)).sends == ()
    events = protocol.on_control_message(own, EndOfStreamMessage("t0", 1))
    assert decoded(events) == [(p, EndOfStreamMessage(None, 0)) for p in range(4) if p != AGGREGATE]


steps = st.lists(
    st.tuples(st.floats(min_value=0, max_value=0.5), st.integers(min_value=0, max_value=3)), min_size=1, max_size=40
)


@settings(max_examples=300)
@given(steps, st.booleans())
def test_paced_watermarks_are_increasing_an_interval_apart_and_the_newest_always_goes_out(timeline, aggregate):
    """Any timing of advances and timer calls: what goes out strictly increases, two sends of a stream are
    at least an interval apart, and once an interval passed after the last advance the newest was sent."""
    clock = FakeClock()
    protocol = paced_producer(clock, aggregate=aggregate)
    sent: list[tuple[float, int]] = []
    mark = 0

    def record(events: ControlEvents) -> None:
        sent.extend((clock.now, value) for value in watermarks(events))
        if aggregate:
            sent.extend((clock.now, value) for value in watermarks(protocol.on_flush()))

    for pause, step in timeline:
        clock.now += pause
        if step:
            mark += step
            record(protocol.on_output_watermark(OUT, mark))
        else:
            record(protocol.on_timer())
    clock.now += INTERVAL_MS / 1000
    record(protocol.on_timer())
    values = [value for _, value in sent]
    assert values == sorted(set(values)), "strictly increasing"
    times = [at for at, _ in sent]
    assert all(later - earlier >= INTERVAL_MS / 1000 * (1 - JITTER) for earlier, later in itertools.pairwise(times))
    assert values[-1:] == ([mark] if mark else []), "the newest watermark is never lost"


@settings(max_examples=200)
@given(control_histories(), st.lists(st.floats(min_value=0, max_value=0.3), min_size=1, max_size=60))
def test_paced_forwarding_reconciles_to_the_aggregate_partitions_result(history, pauses):
    """Two-phase mode with pacing: a consumer of another partition, reading the forwarded copies, ends
    and advances as the aggregate partition did once the interval passed after the last message."""
    clock = FakeClock()
    messages = [(p, message) for p, message in history[0] if message.task_name is not None]
    own, other = BY_USER.partition(AGGREGATE), BY_USER.partition((AGGREGATE + 1) % 4)
    protocol = ControlProtocol(
        "Partition 0",
        frozenset({own}),
        consumed=[ConsumedStream(BY_USER, 4, frozenset({own}))],
        settings=ProtocolSettings(aggregate=True, watermark_interval_ms=INTERVAL_MS),
        clock=clock,
    )
    sent: list[ControlSend] = []
    for index, (_, message) in enumerate(messages):
        clock.now += pauses[index % len(pauses)]
        if own not in protocol.ended:
            sent.extend(protocol.on_control_message(own, message).sends)
        sent.extend(protocol.on_timer().sends)
    clock.now += INTERVAL_MS / 1000
    sent.extend(protocol.on_timer().sends)
    downstream = ControlReconciler()
    for send in sent:
        if send.partition == other.partition:
            message = unframe(send.frame)[1]
            assert not isinstance(message, bytes)
            downstream.apply(other, message)
    assert downstream.is_end_of_stream(other) == protocol.reconciler.is_end_of_stream(own)
    assert downstream.watermark(other) == protocol.reconciler.watermark(own)


# --- window boundaries (``millstream.control.boundary``) -------------------------------------------------

BOUNDARY_MS = 1000


def test_a_watermark_passing_a_window_boundary_goes_out_at_once_within_the_interval():
    pacer: WatermarkPacer[str] = WatermarkPacer(INTERVAL_MS, BOUNDARY_MS)
    assert pacer.offer("s", 500, 0.0)
    assert not pacer.offer("s", 999, 0.01), "no boundary passed: held back"
    assert pacer.offer("s", 1000, 0.02), "the end of [0, 1000): at once"
    assert list(pacer.due(1.0)) == [], "what was held back was superseded"


def test_boundaries_faster_than_the_interval_take_the_ordinary_sends_so_the_cost_stays_bounded_by_time():
    pacer: WatermarkPacer[str] = WatermarkPacer(INTERVAL_MS, BOUNDARY_MS)
    assert pacer.offer("s", 500, 0.0)
    assert pacer.offer("s", 1500, 0.05), "the bucket's second send"
    assert not pacer.offer("s", 2500, 0.1), "a second boundary within the interval waits (a replay racing on)"
    assert list(pacer.due(0.15)) == [], "no send refilled yet"
    assert list(pacer.due(0.25)) == [("s", 2500)], "one send refilled: the boundary takes it"
    sent = sum(pacer.offer("s", 3000 + 1000 * i, 0.25 + i / 10_000) for i in range(1000))
    assert sent == 0, "a thousand boundaries within the next interval: nothing before the bucket refills"
    assert list(pacer.due(0.25 + 0.2)) == [("s", 1_002_000)], "then the newest"


def test_a_watermark_held_back_and_released_counts_for_the_next_boundary():
    pacer: WatermarkPacer[str] = WatermarkPacer(INTERVAL_MS, BOUNDARY_MS)
    assert pacer.offer("s", 100, 0.0)
    assert not pacer.offer("s", 900, 0.05)
    assert list(pacer.due(0.2)) == [("s", 900)]
    assert not pacer.offer("s", 950, 0.25), "still the first window"
    assert pacer.offer("s", 1000, 0.26)


def test_without_a_boundary_period_pacing_is_unchanged():
    pacer: WatermarkPacer[str] = WatermarkPacer(INTERVAL_MS)
    assert pacer.offer("s", 500, 0.0)
    assert not pacer.offer("s", 10_000, 0.01)


def test_a_negative_boundary_period_is_refused():
    with pytest.raises(ValueError, match="-1 ms"):
        WatermarkPacer(INTERVAL_MS, -1)


def boundary_producer(clock: FakeClock, interval_ms: int = INTERVAL_MS, aggregate: bool = False) -> ControlProtocol:
    return ControlProtocol(
        "Partition 0",
        frozenset({A0}),
        sources=[SourceInput(SOURCE, frozenset({A0}), 0)],
        produced=[ProducedStream(OUT, 3, 2)],
        settings=ProtocolSettings(
            aggregate=aggregate, watermark_interval_ms=interval_ms, watermark_boundary_ms=BOUNDARY_MS
        ),
        clock=clock,
    )


def test_aggregated_a_boundary_watermark_asks_for_a_flush_instead_of_waiting_for_the_timer():
    clock = FakeClock()
    protocol = boundary_producer(clock, aggregate=True)
    assert protocol.on_output_watermark(OUT, 100) == ControlEvents(flush=True), "the first one passes a boundary"
    protocol.on_flush()
    clock.now += 0.3
    assert protocol.on_output_watermark(OUT, 900) is NO_EVENTS, "deferred for the timer's flush"
    protocol.on_flush()
    clock.now += 0.3
    assert protocol.on_output_watermark(OUT, 1000) == ControlEvents(flush=True)
    assert watermarks(protocol.on_flush()) == [1000]


def test_a_source_message_passing_a_window_boundary_advances_its_stream_without_a_timer_call():
    clock = FakeClock()
    protocol = boundary_producer(clock)
    assert protocol.on_source_message(A0, 100) == ControlEvents(advance=((SOURCE, 100),))
    assert protocol.on_source_message(A0, 900) is NO_EVENTS, "no boundary: for the timer"
    assert protocol.on_source_message(A0, 1200) == ControlEvents(advance=((SOURCE, 1200),))
    assert protocol.on_timer().advance == ((SOURCE, 1200),)
    assert protocol.on_source_message(A0, 1900) is NO_EVENTS


def test_a_producer_sends_the_boundary_watermark_at_once_and_the_others_on_the_timer():
    clock = FakeClock()
    protocol = boundary_producer(clock, interval_ms=3_600_000)
    assert watermarks(protocol.on_output_watermark(OUT, 100)) == [100]
    clock.now += 0.01
    assert protocol.on_output_watermark(OUT, 900) is NO_EVENTS
    assert watermarks(protocol.on_output_watermark(OUT, 1000)) == [1000], "an hour's interval, yet at once"
    assert len(protocol.on_output_watermark(OUT, 2000).sends) == 0, "one early watermark per interval"
    snapshot = protocol.snapshot()
    assert snapshot["held_back"]["output"] == {str(OUT): 2000}, "held back, so part of the snapshot"


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5_000), st.floats(0, 0.5)), min_size=1, max_size=60))
def test_boundary_watermarks_never_exceed_two_per_interval_and_every_boundary_is_sent(steps):
    """Whatever the timing: at most two watermarks go out within an interval, at most ``T / interval + 2``
    over any time ``T`` (the bound without boundaries, plus one), and after a final timer call the newest
    watermark was sent."""
    clock = FakeClock()
    protocol = boundary_producer(clock)
    sent: list[tuple[float, int]] = []
    mark = 0
    for step, pause in steps:
        clock.now += pause
        mark += step
        events = protocol.on_output_watermark(OUT, mark)
        events = events if events.sends else protocol.on_timer()
        sent.extend((clock.now, w) for w in watermarks(events))
    clock.now += 1
    sent.extend((clock.now, w) for w in watermarks(protocol.on_timer()))
    assert sent[-1][1] == mark
    times = [at for at, _ in sent]
    interval = INTERVAL_MS / 1000 * (1 - JITTER)
    for index, at in enumerate(times):
        assert sum(1 for later in times[index:] if later - at < interval) <= 2, sent
        for last, until in enumerate(times[index:], start=index):
            assert last - index + 1 <= (until - at) / interval + 2 + 1e-6, sent
