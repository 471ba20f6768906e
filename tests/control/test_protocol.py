"""One task's control protocol, driven call by call without operators: what it sends, forwards, defers
and re-sends, and what it tells the engine to do with its inputs.

The property tests feed any interleaving and duplication of producers' control messages (the histories
of ``test_reconciliation``), with and without a restart from a snapshot followed by a replay, and check
the engine's view — partitions declared ended, the stream finished, its watermark — against the
reference computed from the set of messages alone.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.control.framing import frame_control_message, unframe
from millstream.control.messages import MAX_WATERMARK, MIN_WATERMARK, EndOfStreamMessage, WatermarkMessage
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
from millstream.model import SystemStream, SystemStreamPartition
from tests.control.test_reconciliation import FakeClock, control_histories, reference

SOURCE = SystemStream("log", "in")
A0, A1 = SOURCE.partition(0), SOURCE.partition(1)
BY_USER = SystemStream("log", "app-1-by-user")
I0, I1 = BY_USER.partition(0), BY_USER.partition(1)
OUT = SystemStream("log", "app-1-by-page")
AGGREGATE = aggregate_partition(BY_USER.stream, 4)


def consumer(*ssps: SystemStreamPartition, partitions: int = 2, **options: Any) -> ControlProtocol:
    return ControlProtocol(
        "Partition 0", frozenset(ssps), consumed=[ConsumedStream(BY_USER, partitions, frozenset(ssps))], **options
    )


def source_task(ooo: int = 0) -> ControlProtocol:
    return ControlProtocol("Partition 0", frozenset({A0, A1}), sources=[SourceInput(SOURCE, frozenset({A0, A1}), ooo)])


def producer(aggregate: bool = False, partitions: int = 3) -> ControlProtocol:
    return ControlProtocol(
        "Partition 0",
        frozenset({A0}),
        sources=[SourceInput(SOURCE, frozenset({A0}), 0)],
        produced=[ProducedStream(OUT, partitions, 2)],
        settings=ProtocolSettings(aggregate=aggregate),
    )


def decoded(events: ControlEvents) -> list[tuple[int, object]]:
    return [(send.partition, unframe(send.frame)[1]) for send in events.sends]


# --- sources ---------------------------------------------------------------------------------------


def test_the_timer_reports_each_source_streams_watermark_the_minimum_over_its_partitions():
    protocol = source_task(ooo=5)
    protocol.on_source_message(A0, 100)
    assert protocol.on_timer() == ControlEvents(advance=((SOURCE, MIN_WATERMARK),)), "A1 holds it back"
    protocol.on_source_message(A1, 50)
    assert protocol.on_timer() == ControlEvents(advance=((SOURCE, 45),))
    assert protocol.task_watermark == 45


def test_a_source_partitions_end_advances_its_stream_and_the_last_one_finishes_it_once():
    protocol = source_task()
    protocol.on_source_message(A0, 100)
    assert protocol.on_end_of_stream(A1) == ControlEvents(advance=((SOURCE, 100),))
    assert protocol.on_end_of_stream(A1) is NO_EVENTS
    assert protocol.on_end_of_stream(A0) == ControlEvents(finish=(SOURCE,))
    assert protocol.ended == {A0, A1} and protocol.task_watermark == MAX_WATERMARK


def test_the_end_of_a_partition_that_is_not_a_sources_is_not_the_protocols_to_handle():
    protocol = consumer(I0)
    assert protocol.on_end_of_stream(I0) is NO_EVENTS, "the protocol declared it; the runtime echoes it"


# --- consuming intermediate streams ----------------------------------------------------------------


def test_a_partition_is_declared_ended_once_every_producer_ended_and_the_stream_finishes_with_the_last():
    protocol = consumer(I0, I1)
    assert protocol.on_control_message(I0, EndOfStreamMessage("t0", 2)) is NO_EVENTS
    assert protocol.on_control_message(I0, EndOfStreamMessage("t0", 2)) is NO_EVENTS, "a duplicate"
    assert protocol.on_control_message(I0, EndOfStreamMessage("t1", 2)) == ControlEvents(
        ended=(I0,), advance=((BY_USER, MIN_WATERMARK),)
    )
    assert protocol.on_control_message(I1, EndOfStreamMessage(None, 0)) == ControlEvents(ended=(I1,), finish=(BY_USER,))


def test_a_stream_advances_to_the_minimum_over_the_tasks_partitions_when_one_of_them_advances():
    protocol = consumer(I0, I1)
    protocol.on_control_message(I0, WatermarkMessage(5, "t0", 2))
    assert protocol.on_control_message(I0, WatermarkMessage(8, "t1", 2)) == ControlEvents(
        advance=((BY_USER, MIN_WATERMARK),)
    ), "I1 has no watermark yet"
    assert protocol.on_control_message(I1, WatermarkMessage(3, None, 0)) == ControlEvents(advance=((BY_USER, 3),))
    assert protocol.on_control_message(I1, WatermarkMessage(2, None, 0)) is NO_EVENTS, "never regresses"
    assert protocol.task_watermark == 3


def test_idle_producers_stop_holding_the_stream_back_at_the_timer():
    clock = FakeClock()
    protocol = consumer(I0, settings=ProtocolSettings(idle_timeout_ms=1000), clock=clock)
    protocol.on_control_message(I0, WatermarkMessage(15, "t0", 2))
    protocol.saved()
    assert protocol.on_timer() is NO_EVENTS and not protocol.unsaved
    clock.now += 1.5
    assert protocol.on_timer() == ControlEvents(advance=((BY_USER, 15),))
    assert protocol.unsaved


# --- producing -------------------------------------------------------------------------------------


def test_broadcast_sends_each_watermark_to_every_partition_at_once_and_asks_for_no_commit():
    protocol = producer()
    events = protocol.on_output_watermark(OUT, 5)
    assert decoded(events) == [(p, WatermarkMessage(5, "Partition 0", 2)) for p in range(3)]
    assert events == ControlEvents(sends=events.sends) and not protocol.wants_commit


def test_broadcast_sends_end_of_stream_once_to_the_aggregate_partition_after_a_flush():
    protocol = producer(partitions=5)
    assert protocol.on_output_end_of_stream(OUT) == ControlEvents(flush=True) and protocol.wants_commit
    assert decoded(protocol.on_flush()) == [(aggregate_partition(OUT.stream, 5), EndOfStreamMessage("Partition 0", 2))]


def test_aggregate_mode_defers_to_the_next_flush_and_keeps_what_it_sent_in_flight_until_the_one_after():
    protocol = producer(aggregate=True, partitions=4)
    assert protocol.on_output_watermark(OUT, 5) is NO_EVENTS
    assert protocol.wants_commit and protocol.unsaved
    sent = protocol.on_flush()
    assert decoded(sent) == [(aggregate_partition(OUT.stream, 4), WatermarkMessage(5, "Partition 0", 2))]
    assert protocol.in_flight == list(sent.sends) and protocol.wants_commit
    assert protocol.snapshot()["in_flight"] == [[str(OUT), send.partition, send.frame] for send in sent.sends]
    assert protocol.on_flush() is NO_EVENTS
    assert not protocol.wants_commit and protocol.in_flight == []


def test_the_aggregate_partitions_task_forwards_reconciled_results_without_a_task_name():
    own = BY_USER.partition(AGGREGATE)
    protocol = consumer(own, partitions=4, settings=ProtocolSettings(aggregate=True))
    others = [p for p in range(4) if p != AGGREGATE]
    assert protocol.on_control_message(own, WatermarkMessage(7, "t0", 2)).sends == ()
    assert decoded(protocol.on_control_message(own, WatermarkMessage(9, "t1", 2))) == [
        (p, WatermarkMessage(7, None, 0)) for p in others
    ]
    events = protocol.on_control_message(own, EndOfStreamMessage(None, 0))
    assert events.sends == () and events.finish == (BY_USER,), "an authoritative message is not forwarded"


def test_other_partitions_tasks_forward_nothing():
    other = BY_USER.partition((AGGREGATE + 1) % 4)
    protocol = consumer(other, partitions=4, settings=ProtocolSettings(aggregate=True))
    protocol.on_control_message(other, WatermarkMessage(7, "t0", 1))
    assert protocol.on_control_message(other, EndOfStreamMessage("t0", 1)).sends == ()


# --- restarts --------------------------------------------------------------------------------------


def test_after_a_restore_the_first_call_resends_whats_in_flight_and_redeclares_ended_partitions_once():
    before = ControlProtocol(
        "Partition 0",
        frozenset({I0, I1, A0}),
        sources=[SourceInput(SOURCE, frozenset({A0}), 0)],
        consumed=[ConsumedStream(BY_USER, 2, frozenset({I0, I1}))],
        produced=[ProducedStream(OUT, 4, 1)],
        settings=ProtocolSettings(aggregate=True),
    )
    before.on_control_message(I1, EndOfStreamMessage(None, 0))
    before.on_end_of_stream(A0)
    before.on_output_end_of_stream(OUT)
    in_flight = before.on_flush().sends
    after = ControlProtocol(
        "Partition 0",
        before.ssps,
        sources=before.sources.values(),
        consumed=before.consumed.values(),
        produced=before.produced.values(),
        settings=before.settings,
    )
    assert after.resume() is NO_EVENTS, "nothing to resume without a restore"
    after.restore(before.snapshot())
    assert after.resume() == ControlEvents(sends=in_flight, ended=(I1,)), "a source's end comes from the system"
    assert after.resume() is NO_EVENTS
    assert after.ended == {I1, A0} and after.snapshot() == before.snapshot()


def test_repositioned_partitions_are_not_restored_as_ended():
    before = consumer(I0, I1)
    before.on_control_message(I0, EndOfStreamMessage(None, 0))
    before.on_control_message(I1, EndOfStreamMessage(None, 0))
    after = consumer(I0, I1)
    after.restore(before.snapshot(), repositioned=frozenset({I1}))
    assert after.ended == {I0}


def test_unsaved_tracks_changes_since_the_last_save():
    protocol = consumer(I0)
    assert not protocol.unsaved
    protocol.on_control_message(I0, WatermarkMessage(1, "t0", 2))
    assert protocol.unsaved, "one producer's watermark is state even before the partition's moves"
    protocol.saved()
    assert not protocol.unsaved


# --- the algebra -----------------------------------------------------------------------------------


class Engine:
    """The engine's view of one consumed stream: what it was told, as ``TaskGraph.apply`` does it."""

    def __init__(self) -> None:
        self.watermark = MIN_WATERMARK
        self.finished = False
        self.declared: list[SystemStreamPartition] = []
        self.sent: list[ControlSend] = []

    def apply(self, events: ControlEvents) -> None:
        self.sent.extend(events.sends)
        self.declared.extend(events.ended)
        for _, watermark in events.advance:
            if not self.finished and watermark > self.watermark:
                self.watermark = watermark
        for _ in events.finish:
            assert not self.finished, "a stream finishes once"
            self.finished, self.watermark = True, MAX_WATERMARK


def feed(protocol: ControlProtocol, engine: Engine, messages: list[tuple[int, Any]]) -> None:
    for partition, message in messages:
        ssp = BY_USER.partition(partition)
        if ssp not in protocol.ended:  # the engine drops what ended partitions deliver
            engine.apply(protocol.on_control_message(ssp, message))


def assert_reference(engine: Engine, messages: list[tuple[int, Any]], count: int) -> None:
    results = [reference(messages, count, partition) for partition in (0, 1)]
    assert sorted(engine.declared) == [BY_USER.partition(p) for p, (ended, _) in enumerate(results) if ended]
    assert engine.finished == all(ended for ended, _ in results)
    assert engine.watermark == min(watermark for _, watermark in results)


@settings(max_examples=300)
@given(control_histories())
def test_any_interleaving_and_duplication_tells_the_engine_the_reference_result_once(history):
    messages, count = history
    engine = Engine()
    feed(consumer(I0, I1), engine, messages)
    assert_reference(engine, messages, count)


@settings(max_examples=300)
@given(control_histories(), st.data())
def test_a_restart_from_a_snapshot_with_a_replay_tells_the_engine_the_reference_result(history, data):
    """Snapshot at a commit, restore in a new protocol, replay from an earlier checkpoint: the restarted
    engine (its operators restored with the snapshot) ends where an uninterrupted one does."""
    messages, count = history
    cut = data.draw(st.integers(min_value=0, max_value=len(messages)), label="snapshot at")
    checkpoint = data.draw(st.integers(min_value=0, max_value=cut), label="checkpoint at")
    first, engine = consumer(I0, I1), Engine()
    feed(first, engine, messages[:cut])
    restarted = consumer(I0, I1)
    restarted.restore(first.snapshot())
    engine.declared = []  # the runtime forgot which partitions ended
    engine.apply(restarted.resume())
    feed(restarted, engine, messages[checkpoint:])
    assert_reference(engine, messages, count)


@settings(max_examples=200)
@given(control_histories())
def test_what_the_aggregating_task_forwards_reconciles_to_its_own_result(history):
    """Two-phase mode: a consumer of another partition, reading only the forwarded copies, ends and
    advances exactly as the aggregate partition did (whose producers all name themselves)."""
    messages = [(p, message) for p, message in history[0] if message.task_name is not None]
    own, other = BY_USER.partition(AGGREGATE), BY_USER.partition((AGGREGATE + 1) % 4)
    protocol, engine = consumer(own, partitions=4, settings=ProtocolSettings(aggregate=True)), Engine()
    for _, message in messages:
        if own not in protocol.ended:
            engine.apply(protocol.on_control_message(own, message))
    downstream = ControlReconciler()
    for send in engine.sent:
        if send.partition == other.partition:
            message = unframe(send.frame)[1]
            assert not isinstance(message, bytes)  # the engine sends control messages only
            downstream.apply(other, message)
    assert downstream.is_end_of_stream(other) == protocol.reconciler.is_end_of_stream(own)
    assert downstream.watermark(other) == protocol.reconciler.watermark(own)
    assert {send.partition for send in engine.sent} <= {p for p in range(4) if p != AGGREGATE}


def test_frames_are_the_wire_format():
    (send,) = producer(partitions=1).on_output_watermark(OUT, 5).sends
    assert send == ControlSend(OUT, 0, frame_control_message(WatermarkMessage(5, "Partition 0", 2)))
