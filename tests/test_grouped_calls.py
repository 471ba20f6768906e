"""Calls made at the same time are made as one: the queue takes every waiting item in arrival order and none while
a call runs, each item gets its own answer (or its own failure), a failed call fails every item it held, and
callers on several threads share one call while another runs."""

from __future__ import annotations

import threading

import pytest

from millstream.grouped_calls import CallBatches, GroupedCalls
from tests.helpers import wait_until


def test_the_batches_take_every_waiting_item_in_arrival_order_and_none_while_a_call_runs() -> None:
    batches: CallBatches[str] = CallBatches()
    a = batches.add("a")
    first = batches.next_batch()
    assert first == [a] and batches.running
    b, c = batches.add("b"), batches.add("c")
    assert batches.next_batch() is None, "a second batch while the first runs"
    batches.ended(first, ["A"])
    assert a.done and a.error is None and a.result == "A"
    assert batches.next_batch() == [b, c]
    assert batches.next_batch() is None and batches.batches == 2


def test_an_items_own_failure_reaches_only_that_item_and_a_failed_call_every_item() -> None:
    batches: CallBatches[str] = CallBatches()
    a, b = batches.add("a"), batches.add("b")
    batch = batches.next_batch()
    assert batch is not None
    batches.ended(batch, [None, OSError("disk full")])
    assert a.error is None and isinstance(b.error, OSError) and b.result is None
    c = batches.add("c")
    batch = batches.next_batch()
    assert batch is not None
    batches.ended(batch, [], PermissionError("superseded"))
    assert isinstance(c.error, PermissionError) and c.done


def test_callers_arriving_while_a_call_runs_share_the_next_call_each_getting_its_own_answer() -> None:
    entered, release = threading.Event(), threading.Event()
    calls: list[list[int]] = []

    def run(items: list[int]) -> list[int | BaseException]:
        calls.append(items)
        if len(calls) == 1:
            entered.set()
            assert release.wait(30), "the test never released the first call"
        return [ValueError(item) if item == 3 else item * 10 for item in items]

    grouped: GroupedCalls[int, int] = GroupedCalls(run)
    answers: dict[int, int | BaseException] = {}

    def call(item: int) -> None:
        try:
            answers[item] = grouped.call(item)
        except ValueError as error:
            answers[item] = error

    threads = [threading.Thread(target=call, args=(1,))]
    threads[0].start()
    assert entered.wait(30)
    threads += [threading.Thread(target=call, args=(item,)) for item in (2, 3, 4)]
    for thread in threads[1:]:
        thread.start()
    wait_until(lambda: grouped.waiting == 3, 30, "the later callers to wait")
    release.set()
    for thread in threads:
        thread.join(30)
    assert calls[0] == [1] and sorted(calls[1]) == [2, 3, 4] and grouped.batches == 2
    assert {item: answers[item] for item in (1, 2, 4)} == {1: 10, 2: 20, 4: 40}
    assert isinstance(answers[3], ValueError)


def test_a_call_that_answers_for_fewer_items_than_it_was_given_fails_them_all_instead_of_hanging() -> None:
    answers = iter([[], [50]])
    grouped: GroupedCalls[int, int] = GroupedCalls(lambda items: next(answers))
    with pytest.raises(RuntimeError, match="answered 0 of its 1 items"):
        grouped.call(1)
    assert grouped.call(5) == 50, "the queue is free again"
