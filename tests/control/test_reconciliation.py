"""Reconciliation of control messages per intermediate partition: Samza's rules, and their algebra.

The example tests reuse Samza's ``TestEndOfStreamStates`` / ``TestWatermarkStates`` cases; the
property tests check that any interleaving, duplication and restart (snapshot, restore, replay) of a
set of control messages gives the reference result computed from the set alone.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.control.messages import MAX_WATERMARK, MIN_WATERMARK, EndOfStreamMessage, WatermarkMessage
from millstream.control.reconciliation import ControlReconciler, Reconciled
from millstream.model import SystemStreamPartition

P0 = SystemStreamPartition("log", "app-1-by-user", 0)
P1 = SystemStreamPartition("log", "app-1-by-user", 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def wm(timestamp: int, task: str | None, count: int = 2) -> WatermarkMessage:
    return WatermarkMessage(timestamp, task, count if task is not None else 0)


def eos(task: str | None, count: int = 2) -> EndOfStreamMessage:
    return EndOfStreamMessage(task, count if task is not None else 0)


def stream_watermark(reconciler: ControlReconciler, *ssps: SystemStreamPartition) -> int:
    """A task's watermark of a stream: the minimum over its partitions of it."""
    return min(reconciler.watermark(ssp) for ssp in ssps)


# --- end-of-stream (TestEndOfStreamStates) ---------------------------------------------------------


def test_intermediate_partition_ends_only_once_every_producing_task_sent_end_of_stream():
    reconciler = ControlReconciler()
    reconciler.register([P0, P1])
    assert reconciler.apply(P0, eos("task 0")) == Reconciled()
    assert reconciler.apply(P1, eos("task 1")) == Reconciled()
    assert not reconciler.is_end_of_stream(P0) and not reconciler.is_end_of_stream(P1)
    assert reconciler.apply(P0, eos("task 1")) == Reconciled(end_of_stream=True)
    assert reconciler.is_end_of_stream(P0) and not reconciler.is_end_of_stream(P1)
    assert reconciler.apply(P1, eos("task 0")).end_of_stream
    assert reconciler.watermark(P0) == reconciler.watermark(P1) == MAX_WATERMARK


def test_end_of_stream_without_a_task_name_is_authoritative():
    reconciler = ControlReconciler()
    assert reconciler.apply(P0, eos(None)).end_of_stream


def test_a_duplicated_end_of_stream_from_one_producer_does_not_count_twice():
    reconciler = ControlReconciler()
    reconciler.apply(P0, eos("task 0"))
    assert not reconciler.apply(P0, eos("task 0")).end_of_stream
    assert not reconciler.is_end_of_stream(P0)


def test_an_ended_partition_reports_nothing_more():
    reconciler = ControlReconciler()
    reconciler.apply(P0, eos(None))
    assert reconciler.apply(P0, wm(5, "task 0")) == Reconciled()
    assert reconciler.apply(P0, eos("task 0")) == Reconciled()


# --- watermarks (TestWatermarkStates) --------------------------------------------------------------


def test_watermark_is_the_minimum_over_producers_and_a_tasks_the_minimum_over_its_partitions():
    reconciler = ControlReconciler()
    reconciler.register([P0, P1])
    reconciler.apply(P0, wm(6, "t0"))
    reconciler.apply(P0, wm(3, "t1"))
    reconciler.apply(P1, wm(10, "t0"))
    reconciler.apply(P1, wm(4, "t1"))
    assert (reconciler.watermark(P0), reconciler.watermark(P1)) == (3, 4)
    assert stream_watermark(reconciler, P0, P1) == 3

    assert reconciler.apply(P0, wm(8, "t1")) == Reconciled(watermark=6)
    assert stream_watermark(reconciler, P0, P1) == 4

    assert reconciler.apply(P1, wm(7, "t1")) == Reconciled(watermark=7)
    assert stream_watermark(reconciler, P0, P1) == 6


def test_no_watermark_until_every_producer_reported():
    reconciler = ControlReconciler()
    assert reconciler.apply(P0, wm(5, "t0")) == Reconciled()
    assert reconciler.watermark(P0) == MIN_WATERMARK
    assert reconciler.apply(P0, wm(3, "t1")) == Reconciled(watermark=3)


def test_a_lower_watermark_from_the_same_producer_is_ignored():
    reconciler = ControlReconciler()
    reconciler.apply(P0, wm(5, "t0"))
    reconciler.apply(P0, wm(6, "t1"))
    assert reconciler.apply(P0, wm(2, "t0")) == Reconciled()
    assert reconciler.watermark(P0) == 5


def test_watermark_is_reported_only_when_it_advances():
    reconciler = ControlReconciler()
    reconciler.apply(P0, wm(5, "t0"))
    assert reconciler.apply(P0, wm(5, "t1")) == Reconciled(watermark=5)
    assert reconciler.apply(P0, wm(9, "t1")) == Reconciled()  # t0 still holds it at 5
    assert reconciler.apply(P0, wm(5, "t0")) == Reconciled()


def test_watermark_without_a_task_name_only_raises_the_watermark():
    reconciler = ControlReconciler()
    assert reconciler.apply(P0, wm(7, None)) == Reconciled(watermark=7)
    assert reconciler.apply(P0, wm(4, None)) == Reconciled()
    assert reconciler.watermark(P0) == 7


def test_the_largest_producer_count_any_message_carried_is_expected():
    reconciler = ControlReconciler()
    reconciler.apply(P0, wm(5, "t0", count=3))
    assert reconciler.apply(P0, wm(5, "t1", count=3)) == Reconciled()
    assert reconciler.apply(P0, wm(5, "t2", count=3)) == Reconciled(watermark=5)


# --- idle producers ---------------------------------------------------------------------------------


def test_idle_timeout_at_startup_lets_a_quorum_set_the_watermark():
    clock = FakeClock()
    reconciler = ControlReconciler(idle_timeout_ms=1000, quorum_percentage=0.5, clock=clock)
    reconciler.register([P0])
    assert reconciler.apply(P0, wm(5, "t0", count=4)) == Reconciled()
    clock.now += 0.5
    assert reconciler.apply(P0, wm(6, "t1", count=4)) == Reconciled()  # not idle long enough yet
    clock.now += 0.6
    assert reconciler.check_idle() == {P0: 5}  # 2 of 4 reported: a quorum of int(4 * 0.5)


def test_without_a_quorum_an_idle_timeout_sets_no_watermark():
    clock = FakeClock()
    reconciler = ControlReconciler(idle_timeout_ms=1000, quorum_percentage=0.75, clock=clock)
    reconciler.register([P0])
    reconciler.apply(P0, wm(5, "t0", count=4))
    reconciler.apply(P0, wm(6, "t1", count=4))
    clock.now += 5
    assert reconciler.check_idle() == {}
    assert reconciler.watermark(P0) == MIN_WATERMARK


def test_an_idle_producer_stops_holding_the_watermark_back_once_the_active_ones_are_a_quorum():
    clock = FakeClock()
    reconciler = ControlReconciler(idle_timeout_ms=1000, quorum_percentage=0.5, clock=clock)
    reconciler.register([P0])
    reconciler.apply(P0, wm(1, "t0"))
    assert reconciler.apply(P0, wm(1, "t1")) == Reconciled(watermark=1)
    clock.now += 0.8
    assert reconciler.apply(P0, wm(10, "t1")) == Reconciled()  # t0 was heard from 0.8 s ago: still active
    clock.now += 0.5
    assert reconciler.apply(P0, wm(12, "t1")) == Reconciled(watermark=12)  # t0 idle for 1.3 s
    assert reconciler.apply(P0, wm(3, "t0")) == Reconciled()  # never regresses
    assert reconciler.watermark(P0) == 12


def test_without_an_idle_timeout_a_silent_producer_holds_the_watermark_forever():
    clock = FakeClock()
    reconciler = ControlReconciler(clock=clock)
    reconciler.apply(P0, wm(5, "t0"))
    clock.now += 3600
    assert reconciler.check_idle() == {}
    assert reconciler.watermark(P0) == MIN_WATERMARK


# --- the algebra: any interleaving, duplication and restart gives the reference result --------------

PRODUCERS = ["task 0", "task 1", "task 2"]


@st.composite
def control_histories(draw: Any) -> tuple[list[tuple[int, Any]], int]:
    """Messages of ``n`` producers to two partitions, interleaved arbitrarily, some duplicated later."""
    count = draw(st.integers(min_value=1, max_value=len(PRODUCERS)))
    producers = PRODUCERS[:count]
    messages: list[tuple[int, Any]] = []
    for partition in (0, 1):
        for task in producers:
            for timestamp in draw(st.lists(st.integers(min_value=-5, max_value=50), max_size=4)):
                messages.append((partition, WatermarkMessage(timestamp, task, count)))
            if draw(st.booleans()):
                messages.append((partition, EndOfStreamMessage(task, count)))
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            messages.append((partition, WatermarkMessage(draw(st.integers(-5, 50)), None, 0)))
    order = draw(st.permutations(messages))
    duplicates = draw(st.lists(st.sampled_from(order), max_size=6)) if order else []
    shuffled = list(order)
    for duplicate in duplicates:
        shuffled.insert(draw(st.integers(min_value=0, max_value=len(shuffled))), duplicate)
    return shuffled, count


def reference(messages: list[tuple[int, Any]], count: int, partition: int) -> tuple[bool, int]:
    """(ended, watermark) of a partition computed from the *set* of messages, in no particular order."""
    mine = [message for p, message in messages if p == partition]
    ended_tasks = {m.task_name for m in mine if isinstance(m, EndOfStreamMessage)}
    if None in ended_tasks or len(ended_tasks) >= count:
        return True, MAX_WATERMARK
    latest: dict[str, int] = {}
    for m in mine:
        if isinstance(m, WatermarkMessage) and m.task_name is not None:
            latest[m.task_name] = max(latest.get(m.task_name, m.timestamp), m.timestamp)
    watermark = min(latest.values()) if len(latest) >= count else MIN_WATERMARK
    authoritative = [m.timestamp for m in mine if isinstance(m, WatermarkMessage) and m.task_name is None]
    return False, max([watermark, *authoritative])


def ssp(partition: int) -> SystemStreamPartition:
    return P0 if partition == 0 else P1


def replay(messages: list[tuple[int, Any]]) -> tuple[ControlReconciler, dict[int, list[int]]]:
    reconciler = ControlReconciler()
    reported: dict[int, list[int]] = {0: [], 1: []}
    for partition, message in messages:
        result = reconciler.apply(ssp(partition), message)
        if result.watermark is not None:
            reported[partition].append(result.watermark)
    return reconciler, reported


@settings(max_examples=300)
@given(control_histories())
def test_any_interleaving_and_duplication_gives_the_reference_result(history):
    messages, count = history
    reconciler, reported = replay(messages)
    for partition in (0, 1):
        ended, watermark = reference(messages, count, partition)
        assert reconciler.is_end_of_stream(ssp(partition)) == ended
        assert reconciler.watermark(ssp(partition)) == watermark
        assert reported[partition] == sorted(set(reported[partition])), "reported watermarks must only advance"


@settings(max_examples=300)
@given(control_histories(), st.data())
def test_a_restart_from_a_snapshot_with_a_replay_gives_the_reference_result(history, data):
    """A snapshot taken at any point (a commit), restored in a new reconciler (a restarted task), followed
    by a replay of everything after any earlier point (the last checkpoint) and then the rest."""
    messages, count = history
    cut = data.draw(st.integers(min_value=0, max_value=len(messages)), label="snapshot at")
    checkpoint = data.draw(st.integers(min_value=0, max_value=cut), label="checkpoint at")
    before, _ = replay(messages[:cut])
    restarted = ControlReconciler()
    restarted.restore(before.snapshot())
    for partition, message in messages[checkpoint:]:
        restarted.apply(ssp(partition), message)
    uninterrupted, _ = replay(messages)
    for partition in (0, 1):
        assert restarted.is_end_of_stream(ssp(partition)) == uninterrupted.is_end_of_stream(ssp(partition))
        assert restarted.watermark(ssp(partition)) == uninterrupted.watermark(ssp(partition))
        assert (restarted.is_end_of_stream(ssp(partition)), restarted.watermark(ssp(partition))) == reference(
            messages, count, partition
        )


@given(control_histories())
def test_a_snapshot_survives_a_round_trip_through_its_document(history):
    messages, _ = history
    reconciler, _ = replay(messages)
    restored = ControlReconciler()
    restored.restore(reconciler.snapshot())
    assert restored.snapshot() == reconciler.snapshot()
