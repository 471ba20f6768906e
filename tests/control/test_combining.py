"""A container's combined watermarks (``millstream.control.combining``): one record per partition carrying the
minimum over the container's producing tasks and their names, paced per stream; and the consuming side, which
raises each named task's watermark to it and never lowers one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.control.combining import WatermarkCombiner
from millstream.control.framing import MessageType, frame_control_message, unframe
from millstream.control.messages import (
    MAX_WATERMARK,
    MIN_WATERMARK,
    CombinedWatermarkMessage,
    EndOfStreamMessage,
    WatermarkMessage,
)
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
from tests.control.test_reconciliation import FakeClock, eos, wm

OUT = SystemStream("log", "app-1-by-page")
OTHER = SystemStream("log", "app-1-by-user")
SOURCE = SystemStream("log", "in")
I0 = OUT.partition(0)


def combiner(clock: FakeClock, interval_ms: int = 0, boundary_ms: int = 0, tasks: int = 3) -> WatermarkCombiner:
    combined = WatermarkCombiner(interval_ms, boundary_ms, clock)
    for task in range(tasks):
        combined.join(f"t{task}", [ProducedStream(OUT, 2, 4)])
    return combined


def records(sends: tuple[ControlSend, ...]) -> list[tuple[int, CombinedWatermarkMessage]]:
    decoded = []
    for send in sends:
        kind, message = unframe(send.frame)
        assert kind == MessageType.COMBINED_WATERMARK and isinstance(message, CombinedWatermarkMessage)
        decoded.append((send.partition, message))
    return decoded


def test_a_record_carries_the_minimum_over_the_tasks_that_reported_and_names_them_to_every_partition():
    combined = combiner(FakeClock())
    assert records(combined.report("t1", OUT, 50)) == [(p, CombinedWatermarkMessage(50, ("t1",), 4)) for p in (0, 1)], (
        "a task that never reported (t0, t2) is not named: consumers wait for it as before"
    )
    assert records(combined.report("t0", OUT, 30)) == [
        (p, CombinedWatermarkMessage(30, ("t0", "t1"), 4)) for p in (0, 1)
    ]
    assert records(combined.report("t2", OUT, 70))[0] == (0, CombinedWatermarkMessage(30, ("t0", "t1", "t2"), 4))


def test_only_a_record_that_raises_a_named_task_is_sent():
    combined = combiner(FakeClock())
    combined.report("t0", OUT, 30)
    combined.report("t1", OUT, 50)
    assert combined.report("t1", OUT, 60) == (), "the minimum (t0's 30) did not move: it would raise nobody"
    assert combined.report("t1", OUT, 60) == (), "not an advance of t1's"
    assert combined.report("t0", OUT, 20) == (), "a task's watermark never goes back"
    assert [m.timestamp for _, m in records(combined.report("t0", OUT, 55))] == [55, 55]


def test_records_are_paced_per_stream_and_a_held_back_one_is_computed_anew_by_any_tasks_timer():
    clock = FakeClock()
    combined = combiner(clock, interval_ms=200)
    combined.join("t0", [ProducedStream(OTHER, 3, 4)])
    assert len(combined.report("t0", OUT, 10)) == 2, "the first of an interval goes out at once"
    assert len(combined.report("t0", OTHER, 10)) == 3, "another stream has an interval of its own"
    assert combined.report("t0", OUT, 20) == () and combined.report("t1", OUT, 40) == ()
    assert combined.due() == (), "the interval has not passed"
    clock.now += 0.2
    assert {m for _, m in records(combined.due())} == {CombinedWatermarkMessage(20, ("t0", "t1"), 4)}
    assert combined.due() == ()


def test_a_minimum_passing_a_window_boundary_goes_out_within_the_interval():
    combined = combiner(FakeClock(), interval_ms=200, boundary_ms=100)
    combined.report("t0", OUT, 10)
    assert combined.report("t0", OUT, 50) == ()
    assert [m.timestamp for _, m in records(combined.report("t0", OUT, 100))] == [100, 100]


def test_a_task_that_leaves_is_no_longer_named_and_no_longer_holds_the_minimum_back():
    combined = combiner(FakeClock())
    combined.report("t0", OUT, 10)
    combined.report("t1", OUT, 50)
    combined.leave("t0")
    assert combined.reported("t0") == {}
    assert records(combined.report("t1", OUT, 60))[0][1] == CombinedWatermarkMessage(60, ("t1",), 4)
    with pytest.raises(KeyError, match="t0"):
        combined.report("t0", OUT, 70)


def test_a_task_that_joins_later_is_named_from_its_first_watermark_on_even_below_the_minimum_sent():
    combined = combiner(FakeClock(), tasks=1)
    combined.report("t0", OUT, 50)
    combined.join("t9", [ProducedStream(OUT, 2, 4)])
    assert records(combined.report("t9", OUT, 20))[0][1] == CombinedWatermarkMessage(20, ("t0", "t9"), 4), (
        "lower than t0's earlier record: harmless, consumers keep t0's maximum"
    )


def test_a_finished_task_stays_named_at_the_maximum_so_it_rises_with_the_others_downstream():
    combined = combiner(FakeClock(), tasks=2)
    combined.report("t0", OUT, 10)
    combined.report("t1", OUT, MAX_WATERMARK)
    assert records(combined.report("t0", OUT, 40))[0][1] == CombinedWatermarkMessage(40, ("t0", "t1"), 4)


def test_a_tasks_snapshot_keeps_its_newest_watermark_whether_a_record_covered_it_or_not():
    """The record that covered it went through whichever task's collector: not necessarily durable when this
    task's checkpoint is, so a restart sends it again (harmless downstream)."""
    clock = FakeClock()
    combined = combiner(clock, interval_ms=200)
    combined.report("t0", OUT, 10)
    combined.report("t0", OUT, 30)
    assert combined.reported("t0") == {OUT: 30} and combined.reported("t1") == {}
    clock.now += 0.2
    assert combined.due() and combined.reported("t0") == {OUT: 30}


def test_a_combined_record_raises_each_named_tasks_watermark_and_never_lowers_one():
    clock = FakeClock()
    reconciler = ControlReconciler(clock=clock)
    reconciler.apply(I0, wm(70, "t1", 3))
    assert reconciler.apply(I0, CombinedWatermarkMessage(40, ("t0", "t1"), 3)).watermark is None, "t2 not heard"
    assert reconciler.partitions[I0].timestamps == {"t0": 40, "t1": 70}, "t1 kept its higher 70"
    assert reconciler.apply(I0, wm(90, "t2", 3)).watermark == 40
    assert reconciler.apply(I0, CombinedWatermarkMessage(80, ("t0", "t1"), 3)).watermark == 80
    assert reconciler.apply(I0, CombinedWatermarkMessage(80, ("t0", "t1"), 3)).watermark is None, "idempotent"
    assert reconciler.apply(I0, CombinedWatermarkMessage(10, ("t0", "t1", "t2"), 3)).watermark is None
    assert reconciler.watermark(I0) == 80 and reconciler.partitions[I0].timestamps == {"t0": 80, "t1": 80, "t2": 90}
    for task in ("t0", "t1", "t2"):
        reconciler.apply(I0, eos(task, 3))
    assert reconciler.watermark(I0) == MAX_WATERMARK


def test_a_combined_record_counts_its_task_count_as_the_producers_to_wait_for():
    reconciler = ControlReconciler(clock=FakeClock())
    assert reconciler.apply(I0, CombinedWatermarkMessage(5, ("t0", "t1"), 3)).watermark is None
    assert reconciler.partitions[I0].expected == 3 and reconciler.watermark(I0) == MIN_WATERMARK


def test_the_combined_frame_names_its_tasks_and_malformed_ones_fail_naming_the_record():
    message = CombinedWatermarkMessage(123, ("Partition 0", "Partition 2"), 8)
    frame = frame_control_message(message)
    assert frame[0] == MessageType.COMBINED_WATERMARK
    assert b'"taskNames":["Partition 0","Partition 2"]' in frame
    assert unframe(frame) == (MessageType.COMBINED_WATERMARK, message)
    from millstream.control.errors import FramingError

    with pytest.raises(FramingError, match=r"offset 4: .*taskNames"):
        unframe(b'\x04{"taskNames": [], "taskCount": 2, "timestamp": 1}', "offset 4")
    with pytest.raises(FramingError, match=r"offset 4: .*taskCount"):
        unframe(b'\x04{"taskNames": ["a"], "timestamp": 1}', "offset 4")


def producing_task(name: str, combined: WatermarkCombiner, aggregate: bool = False, tasks: int = 4) -> ControlProtocol:
    return ControlProtocol(
        name,
        frozenset({SOURCE.partition(0)}),
        sources=[SourceInput(SOURCE, frozenset({SOURCE.partition(0)}), 0)],
        produced=[ProducedStream(OUT, 2, tasks)],
        settings=ProtocolSettings(aggregate=aggregate, watermark_interval_ms=200),
        combiner=combined,
        clock=combined.clock,
    )


def test_tasks_given_a_combiner_send_their_watermarks_through_it_and_a_restart_sends_their_newest_again():
    clock = FakeClock()
    combined = WatermarkCombiner(200, clock=clock)
    first, second = producing_task("t0", combined), producing_task("t1", combined)
    assert [m.task_names for _, m in records(first.on_output_watermark(OUT, 10).sends)] == [("t0",)] * 2
    assert second.on_output_watermark(OUT, 20).sends == (), "held back for the container's interval"
    assert second.snapshot()["held_back"]["output"] == {str(OUT): 20}
    clock.now += 0.2
    assert {m for _, m in records(first.on_timer().sends)} == {CombinedWatermarkMessage(10, ("t0", "t1"), 4)}, (
        "any task's timer releases the container's held-back record"
    )
    snapshot = second.snapshot()

    restarted = WatermarkCombiner(200, clock=clock)  # a new container attempt
    again = producing_task("t1", restarted)
    again.restore(snapshot)
    assert {m for _, m in records(again.resume().sends)} == {CombinedWatermarkMessage(20, ("t1",), 4)}


def test_a_task_refuses_a_combiner_of_the_other_fan_out_mode():
    with pytest.raises(ValueError, match=r"'t0'.*broadcast records.*aggregated control messages"):
        producing_task("t0", WatermarkCombiner(0, clock=FakeClock()), aggregate=True)


# --- aggregate mode: the first hop combined ----------------------------------------------------------------

AGGREGATE_OUT = aggregate_partition(OUT.stream, 2)


def test_aggregated_a_record_goes_to_the_aggregate_partition_only_with_the_minimum_and_the_names():
    combined = WatermarkCombiner(0, clock=FakeClock(), aggregate=True)
    for task in ("t0", "t1", "t2"):
        combined.join(task, [ProducedStream(OUT, 2, 4)])
    assert records(combined.report("t1", OUT, 50)) == [(AGGREGATE_OUT, CombinedWatermarkMessage(50, ("t1",), 4))]
    assert records(combined.report("t0", OUT, 30)) == [(AGGREGATE_OUT, CombinedWatermarkMessage(30, ("t0", "t1"), 4))]
    expected = CombinedWatermarkMessage(30, ("t0", "t1", "t2"), 4)
    assert combined.report("t2", OUT, 90) == records_of(AGGREGATE_OUT, expected), "frames exactly as a record's"
    assert combined.report("t1", OUT, 60) == (), "the minimum (t0's 30) did not move: it would raise nobody"
    assert combined.report("t0", OUT, 20) == (), "a task's watermark never goes back"
    assert records(combined.report("t0", OUT, 70)) == [
        (AGGREGATE_OUT, CombinedWatermarkMessage(60, ("t0", "t1", "t2"), 4))
    ], "only advances, to the minimum over the tasks"


def records_of(partition: int, message: CombinedWatermarkMessage) -> tuple[ControlSend, ...]:
    return (ControlSend(OUT, partition, frame_control_message(message)),)


def test_aggregated_a_task_reports_a_watermark_only_after_a_flush_and_the_container_sends_one_record():
    """The aggregate route's rule: a record to one partition is not ordered with the task's output to the
    others, so the task reports its watermark only once a flush made that output durable; the container then
    sends one record for its tasks, not one per task."""
    clock = FakeClock()
    combined = WatermarkCombiner(200, clock=clock, aggregate=True)
    first, second = producing_task("t0", combined, aggregate=True), producing_task("t1", combined, aggregate=True)
    assert first.on_output_watermark(OUT, 10) is NO_EVENTS and second.on_output_watermark(OUT, 20) is NO_EVENTS
    assert combined.reported("t0") == {} and first.wants_commit and first.unsaved
    assert records(first.on_flush().sends) == [(AGGREGATE_OUT, CombinedWatermarkMessage(10, ("t0",), 4))]
    assert second.on_flush() is NO_EVENTS, "within the container's interval: held back"
    assert not first.wants_commit and not second.wants_commit, "a reported watermark needs no further flush"
    clock.now += 0.2
    assert records(second.on_timer().sends) == [(AGGREGATE_OUT, CombinedWatermarkMessage(10, ("t0", "t1"), 4))]
    clock.now += 0.2
    assert first.on_output_watermark(OUT, 30) is NO_EVENTS
    assert records(first.on_flush().sends) == [(AGGREGATE_OUT, CombinedWatermarkMessage(20, ("t0", "t1"), 4))]


def test_aggregated_a_watermark_passing_a_window_boundary_asks_for_a_flush_at_once():
    clock = FakeClock()
    combined = WatermarkCombiner(200, boundary_ms=100, clock=clock, aggregate=True)
    task = ControlProtocol(
        "t0",
        frozenset({SOURCE.partition(0)}),
        sources=[SourceInput(SOURCE, frozenset({SOURCE.partition(0)}), 0)],
        produced=[ProducedStream(OUT, 2, 1)],
        settings=ProtocolSettings(aggregate=True, watermark_interval_ms=200, watermark_boundary_ms=100),
        combiner=combined,
        clock=clock,
    )
    task.on_output_watermark(OUT, 10)
    assert records(task.on_flush().sends)[0][1].timestamp == 10
    assert task.on_output_watermark(OUT, 150) == ControlEvents(flush=True), "a window ends at 100: not held back"
    assert records(task.on_flush().sends) == [(AGGREGATE_OUT, CombinedWatermarkMessage(150, ("t0",), 1))]


def test_aggregated_end_of_stream_reports_the_held_back_watermark_with_it_so_the_containers_minimum_rises():
    clock = FakeClock()
    combined = WatermarkCombiner(200, clock=clock, aggregate=True)
    first, second = producing_task("t0", combined, aggregate=True), producing_task("t1", combined, aggregate=True)
    first.on_output_watermark(OUT, 10)
    second.on_output_watermark(OUT, 40)
    first.on_flush(), second.on_flush()
    assert first.on_output_watermark(OUT, MAX_WATERMARK) is NO_EVENTS, "held back by the task's own interval"
    assert first.on_output_end_of_stream(OUT) == ControlEvents(flush=True)
    clock.now += 0.2
    sent = [message for _, message in (unframe(send.frame) for send in first.on_flush().sends)]
    assert sent == [EndOfStreamMessage("t0", 4), CombinedWatermarkMessage(40, ("t0", "t1"), 4)]


def test_aggregated_a_snapshot_keeps_the_newest_watermark_reported_held_back_or_unreported_and_a_restart_reports_it():
    clock = FakeClock()
    combined = WatermarkCombiner(200, clock=clock, aggregate=True)
    task = producing_task("t0", combined, aggregate=True)
    task.on_output_watermark(OUT, 10)
    task.on_flush()
    assert task.snapshot()["held_back"]["output"] == {str(OUT): 10}, "reported"
    clock.now += 0.2
    task.on_output_watermark(OUT, 20)
    assert task.snapshot()["held_back"]["output"] == {str(OUT): 20}, "not reported yet: it waits for a flush"
    task.on_output_watermark(OUT, 30)
    snapshot = task.snapshot()
    assert snapshot["held_back"]["output"] == {str(OUT): 30}, "held back by the task's interval"

    restarted = WatermarkCombiner(200, clock=clock, aggregate=True)  # a new container attempt
    again = producing_task("t0", restarted, aggregate=True)
    again.restore(snapshot)
    assert again.resume().sends == () and again.wants_commit, "reported at the first flush"
    assert records(again.on_flush().sends) == [(AGGREGATE_OUT, CombinedWatermarkMessage(30, ("t0",), 4))]


AGGREGATED_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("watermark"), st.integers(0, 3), st.integers(1, 50)),
        st.tuples(st.just("flush"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("tick"), st.integers(0, 3), st.integers(0, 300)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(AGGREGATED_STEPS)
def test_aggregated_a_record_never_claims_more_than_a_named_task_had_when_its_output_was_last_flushed(steps):
    """Any interleaving of four tasks' watermark advances, flushes and timer calls in one container: every record
    the container sends is at most, for each task it names, the watermark that task had at its last flush (its
    output before that is durable), so it follows everything they wrote below it; and once every task flushed after
    its last advance and the interval passed, the aggregating partition's watermark is the minimum of all four."""
    clock = FakeClock()
    combined = WatermarkCombiner(200, clock=clock, aggregate=True)
    names = [f"t{i}" for i in range(4)]
    tasks = [producing_task(name, combined, aggregate=True) for name in names]
    current, flushed = [0] * 4, [0] * 4
    reconciler = ControlReconciler(clock=clock)
    target = OUT.partition(AGGREGATE_OUT)

    def deliver(events: ControlEvents) -> None:
        for send in events.sends:
            message = unframe(send.frame)[1]
            assert send.partition == AGGREGATE_OUT and isinstance(message, CombinedWatermarkMessage)
            for name in message.task_names:
                assert message.timestamp <= flushed[names.index(name)], (message, flushed)
            reconciler.apply(target, message)

    def flush(index: int) -> None:
        flushed[index] = current[index]
        deliver(tasks[index].on_flush())

    for kind, index, amount in steps:
        if kind == "watermark":
            current[index] += amount
            if tasks[index].on_output_watermark(OUT, current[index]).flush:
                flush(index)
        elif kind == "flush":
            flush(index)
        else:
            clock.now += amount / 1000
            events = tasks[index].on_timer()
            deliver(events)
            if tasks[index].wants_commit:  # the engine's timer flushes for what waits on it
                flush(index)
    for _ in range(2):  # what the pacers held back goes out once their intervals passed; then the flushes
        clock.now += 0.5
        for index, task in enumerate(tasks):
            deliver(task.on_timer())
            flush(index)
    assert reconciler.watermark(target) == (min(current) if all(current) else MIN_WATERMARK), (current, flushed)


def aggregator(partitions: int = 4, **settings: Any) -> tuple[ControlProtocol, SystemStreamPartition]:
    own = OUT.partition(aggregate_partition(OUT.stream, partitions))
    task = ControlProtocol(
        "Partition 9",
        frozenset({own}),
        consumed=[ConsumedStream(OUT, partitions, frozenset({own}))],
        settings=ProtocolSettings(aggregate=True, **settings),
        clock=FakeClock(),
    )
    return task, own


def test_the_aggregating_task_counts_a_combined_record_for_each_named_task_and_forwards_the_result():
    task, own = aggregator()
    others = [p for p in range(4) if p != own.partition]
    assert task.on_control_message(own, CombinedWatermarkMessage(30, ("t0", "t1"), 3)).sends == (), (
        "t2 has not reported: every producer must be known, as before"
    )
    events = task.on_control_message(own, WatermarkMessage(50, "t2", 3))
    assert decoded(events) == [(p, WatermarkMessage(30, None, 0)) for p in others]
    assert task.on_control_message(own, CombinedWatermarkMessage(20, ("t0", "t1"), 3)) is NO_EVENTS, "only raises"
    events = task.on_control_message(own, CombinedWatermarkMessage(45, ("t0", "t1"), 3))
    assert decoded(events) == [(p, WatermarkMessage(45, None, 0)) for p in others]
    assert task.reconciler.partitions[own].timestamps == {"t0": 45, "t1": 45, "t2": 50}


def test_a_broadcast_consumer_forwards_no_combined_record():
    task, own = aggregator()
    broadcast = ControlProtocol(
        "Partition 9", task.ssps, consumed=task.consumed.values(), settings=ProtocolSettings(), clock=FakeClock()
    )
    events = broadcast.on_control_message(own, CombinedWatermarkMessage(30, ("t0",), 1))
    assert events.sends == () and events.advance == ((OUT, 30),)


def decoded(events: ControlEvents) -> list[tuple[int, object]]:
    return [(send.partition, unframe(send.frame)[1]) for send in events.sends]
