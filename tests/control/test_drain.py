"""Drain in one task's control protocol, message by message: source partitions drained by the runtime,
drain messages reconciled per intermediate partition over every producer, the run id that makes a drain
count, and what a snapshot taken after a drain must not remember."""

from __future__ import annotations

import orjson
import pytest

from millstream.control.errors import FramingError, UnknownMessageTypeError
from millstream.control.framing import MessageType, frame_control_message, unframe
from millstream.control.messages import MAX_WATERMARK, DrainMessage, EndOfStreamMessage, WatermarkMessage
from millstream.control.protocol import (
    NO_EVENTS,
    ConsumedStream,
    ControlEvents,
    ControlProtocol,
    ProducedStream,
    ProtocolSettings,
    SourceInput,
)
from millstream.control.reconciliation import ControlReconciler, Reconciled
from millstream.control.sender import aggregate_partition
from tests.control.test_protocol import A0, A1, AGGREGATE, BY_USER, I0, I1, OUT, SOURCE, decoded

RUN = "run-7"


def consumer(*ssps, partitions: int = 2, **options) -> ControlProtocol:
    return ControlProtocol(
        "Partition 0",
        frozenset(ssps),
        consumed=[ConsumedStream(BY_USER, partitions, frozenset(ssps))],
        run_id=RUN,
        **options,
    )


def source_task(*ssps) -> ControlProtocol:
    ssps = ssps or (A0, A1)
    return ControlProtocol(
        "Partition 0",
        frozenset(ssps),
        sources=[SourceInput(SOURCE, frozenset(ssps), 0)],
        produced=[ProducedStream(OUT, 3, 2)],
        run_id=RUN,
    )


# --- the wire format -------------------------------------------------------------------------------


def test_a_drain_is_type_byte_3_with_version_task_name_task_count_and_run_id():
    frame = frame_control_message(DrainMessage("Partition 3", 4, RUN))
    assert frame[0] == MessageType.DRAIN == 3
    assert orjson.loads(frame[1:]) == {"version": 1, "taskName": "Partition 3", "taskCount": 4, "runId": RUN}
    assert unframe(frame) == (MessageType.DRAIN, DrainMessage("Partition 3", 4, RUN))


def test_samzas_hyphenated_run_id_is_accepted_and_a_drain_without_a_run_id_is_refused():
    payload = orjson.dumps({"version": 1, "task-name": "t1", "task-count": 2, "run-id": "r"})
    assert unframe(bytes([3]) + payload) == (MessageType.DRAIN, DrainMessage("t1", 2, "r"))
    with pytest.raises(FramingError, match=r"offset 4 .*drain message needs a runId"):
        unframe(b'\x03{"taskName": "t1", "taskCount": 2}', "offset 4 of stream 'log.s' partition 0")


@pytest.mark.parametrize("type_byte", [5, 9, 255])
def test_a_type_byte_above_the_known_ones_is_a_newer_producers_message_the_consumer_may_skip(type_byte):
    with pytest.raises(UnknownMessageTypeError, match=r"offset 4 of stream .log.s. partition 0: .*byte") as raised:
        unframe(bytes([type_byte]) + b"{}", "offset 4 of stream 'log.s' partition 0")
    assert raised.value.type_byte == type_byte


def test_an_empty_record_still_fails_naming_its_offset_and_is_not_skippable():
    with pytest.raises(FramingError, match=r"offset 4 of stream .log.s. partition 0: .*empty record") as raised:
        unframe(b"", "offset 4 of stream 'log.s' partition 0")
    assert not isinstance(raised.value, UnknownMessageTypeError)


# --- reconciliation --------------------------------------------------------------------------------


def test_a_partition_drains_once_every_producer_drained_or_ended_and_only_then():
    reconciler = ControlReconciler()
    assert reconciler.apply(I0, DrainMessage("t0", 3, RUN)) == Reconciled()
    assert reconciler.apply(I0, DrainMessage("t0", 3, RUN)) == Reconciled(), "a duplicate"
    assert reconciler.apply(I0, EndOfStreamMessage("t1", 3)) == Reconciled(), "t2 has not spoken"
    assert reconciler.apply(I0, DrainMessage("t2", 3, RUN)) == Reconciled(drained=True)
    assert reconciler.watermark(I0) == MAX_WATERMARK and not reconciler.is_end_of_stream(I0)
    assert reconciler.apply(I0, EndOfStreamMessage("t0", 3)) == Reconciled(), "done for this run"


def test_a_drained_partition_is_saved_with_its_end_of_streams_but_without_its_drains():
    reconciler = ControlReconciler()
    reconciler.apply(I0, WatermarkMessage(40, "t0", 2))
    reconciler.apply(I0, EndOfStreamMessage("t1", 2))
    reconciler.apply(I0, DrainMessage("t0", 2, RUN))
    restored = ControlReconciler()
    restored.restore(reconciler.snapshot())
    state = restored.partitions[I0]
    assert (state.ended, state.ended_tasks, state.drained_tasks) == (False, {"t1"}, set())
    assert restored.apply(I0, EndOfStreamMessage("t0", 2)) == Reconciled(end_of_stream=True), "waits for t0 again"


def test_a_drain_without_a_task_name_drains_the_partition_at_once():
    assert ControlReconciler().apply(I0, DrainMessage(None, 0, RUN)) == Reconciled(drained=True)


# --- consuming -------------------------------------------------------------------------------------


def test_a_drained_partition_is_declared_drained_and_the_stream_finishes_as_drained_with_the_last():
    protocol = consumer(I0, I1)
    assert protocol.on_control_message(I0, DrainMessage("t0", 2, RUN)) is NO_EVENTS
    events = protocol.on_control_message(I0, DrainMessage("t1", 2, RUN))
    assert events == ControlEvents(drained=(I0,), advance=((BY_USER, protocol.reconciler.watermark(I1)),))
    assert protocol.on_control_message(I1, EndOfStreamMessage(None, 0)) == ControlEvents(ended=(I1,), drain=(BY_USER,))
    assert protocol.drained == {I0} and protocol.ended == {I1}


def test_a_stream_whose_partitions_all_ended_for_good_finishes_as_ended_not_drained():
    protocol = consumer(I0)
    protocol.on_control_message(I0, EndOfStreamMessage("t0", 2))
    assert protocol.on_control_message(I0, EndOfStreamMessage("t1", 2)) == ControlEvents(ended=(I0,), finish=(BY_USER,))


def test_a_drain_message_of_another_run_is_ignored_and_counted():
    protocol = consumer(I0)
    assert protocol.on_control_message(I0, DrainMessage(None, 0, "generation-3")) is NO_EVENTS
    assert protocol.on_control_message(I0, DrainMessage("t0", 1, "generation-3")) is NO_EVENTS
    assert protocol.ignored_drains == 2 and protocol.drained == set()
    assert protocol.reconciler.partitions[I0].drained_tasks == set(), "not even recorded"
    assert protocol.on_control_message(I0, DrainMessage("t0", 1, RUN)).drain == (BY_USER,)


def test_the_aggregate_partitions_task_forwards_a_drain_without_a_task_name_with_its_run_id():
    own = BY_USER.partition(AGGREGATE)
    protocol = consumer(own, partitions=4, settings=ProtocolSettings(aggregate=True))
    protocol.on_control_message(own, DrainMessage("t0", 2, RUN))
    events = protocol.on_control_message(own, EndOfStreamMessage("t1", 2))
    assert decoded(events) == [(p, DrainMessage(None, 0, RUN)) for p in range(4) if p != AGGREGATE]
    assert events.drained == (own,) and events.drain == (BY_USER,)


# --- sources and producing -------------------------------------------------------------------------


def test_a_drained_source_partition_advances_its_stream_and_the_last_finishes_it_as_drained():
    protocol = source_task()
    protocol.on_source_message(A0, 100)
    protocol.on_source_message(A1, 50)
    assert protocol.on_drain(A1) == ControlEvents(advance=((SOURCE, 100),))
    assert protocol.on_drain(A1) is NO_EVENTS
    assert protocol.on_end_of_stream(A1) is NO_EVENTS, "a drained partition does not end as well"
    assert protocol.on_drain(A0) == ControlEvents(drain=(SOURCE,))
    assert protocol.task_watermark == MAX_WATERMARK and protocol.ended == set()


def test_a_source_stream_partly_ended_for_good_finishes_as_drained_when_the_rest_drains():
    protocol = source_task()
    protocol.on_end_of_stream(A0)
    assert protocol.on_drain(A0) is NO_EVENTS, "ended for good: nothing left to drain"
    assert protocol.on_drain(A1) == ControlEvents(drain=(SOURCE,))


def test_drain_is_only_a_sources_partition_to_drain():
    assert consumer(I0).on_drain(I0) is NO_EVENTS, "an intermediate partition drains through its producers"


def test_a_producer_sends_one_drain_stamped_with_its_run_to_the_aggregate_partition_after_a_flush():
    protocol = source_task()
    assert protocol.on_output_drain(OUT) == ControlEvents(flush=True), "held back for a flush of the output, now"
    events = protocol.on_flush()
    assert decoded(events) == [(aggregate_partition(OUT.stream, 3), DrainMessage("Partition 0", 2, RUN))]
    assert events == ControlEvents(sends=events.sends), "the task commits as it finishes draining"


# --- what a snapshot after a drain remembers -------------------------------------------------------


def test_a_snapshot_after_a_drain_holds_no_drained_partition_and_no_drain_in_flight():
    protocol = ControlProtocol(
        "Partition 0",
        frozenset({A0, I0}),
        sources=[SourceInput(SOURCE, frozenset({A0}), 0)],
        consumed=[ConsumedStream(BY_USER, 1, frozenset({I0}))],
        produced=[ProducedStream(OUT, 4, 1)],
        settings=ProtocolSettings(aggregate=True),
        run_id=RUN,
    )
    protocol.on_source_message(A0, 70)
    protocol.on_drain(A0)
    protocol.on_control_message(I0, DrainMessage(None, 0, RUN))
    protocol.on_output_drain(OUT)
    assert protocol.on_flush().sends, "the drain went out"
    snapshot = protocol.snapshot()
    assert snapshot["ended"] == [] and snapshot["in_flight"] == []
    assert snapshot["sources"][str(SOURCE)] == {"max": {A0.key(): 70}, "ended": []}
    assert snapshot["reconciler"][I0.key()]["ended"] is False
    restored = ControlProtocol(
        "Partition 0",
        protocol.ssps,
        sources=protocol.sources.values(),
        consumed=protocol.consumed.values(),
        produced=protocol.produced.values(),
        settings=protocol.settings,
        run_id="generation-9",
    )
    restored.restore(snapshot)
    assert not restored.resume(), "nothing re-declared, nothing re-sent"
    assert restored.task_watermark < MAX_WATERMARK and restored.drained == set()
