"""Grouped lookups: callers that wait while a request runs are answered together by the next one, each with its own
keys, and a failed request fails every caller it was made for."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from millstream.connectors.kafka.grouped_lookups import GroupedLookups
from tests.helpers import wait_until


class BlockingFetch:
    """Answers each key with its square; the first request waits until ``release`` is set."""

    def __init__(self) -> None:
        self.requests: list[list[int]] = []
        self.first_began = threading.Event()
        self.release = threading.Event()

    def __call__(self, keys: list[int]) -> dict[int, int]:
        self.requests.append(keys)
        if len(self.requests) == 1:
            self.first_began.set()
            assert self.release.wait(30), "the test never released the first request"
        return {key: key * key for key in keys}


def _lookup_while_first_runs(
    lookups: GroupedLookups[int, int], fetch: BlockingFetch, later: list[list[int]]
) -> tuple[Future[dict[int, int]], list[Future[dict[int, int]]]]:
    """Start a lookup of [1], then the ``later`` lookups once it is under way; release it once they all wait."""
    pool = ThreadPoolExecutor(len(later) + 1)
    first = pool.submit(lookups.lookup, [1])
    assert fetch.first_began.wait(30)
    others = [pool.submit(lookups.lookup, keys) for keys in later]
    wait_until(lambda: lookups.waiting == len(later), 30, "the later callers to wait")
    fetch.release.set()
    pool.shutdown(wait=True)
    return first, others


def test_a_caller_alone_is_answered_at_once_by_a_request_for_its_keys() -> None:
    fetch = BlockingFetch()
    fetch.release.set()
    lookups = GroupedLookups(fetch)
    assert lookups.lookup([2, 3]) == {2: 4, 3: 9}
    assert fetch.requests == [[2, 3]]
    assert lookups.requests == 1


def test_callers_waiting_while_a_request_runs_share_the_next_request_and_each_gets_its_own_keys() -> None:
    fetch = BlockingFetch()
    lookups = GroupedLookups(fetch)
    first, others = _lookup_while_first_runs(lookups, fetch, [[2], [3, 4], [4, 5]])
    assert first.result() == {1: 1}
    assert [other.result() for other in others] == [{2: 4}, {3: 9, 4: 16}, {4: 16, 5: 25}]
    assert len(fetch.requests) == 2
    assert sorted(fetch.requests[1]) == [2, 3, 4, 5]  # each key once, whoever asked for it


def test_a_failed_request_fails_every_caller_it_served_and_the_next_lookup_makes_a_new_request() -> None:
    failure = RuntimeError("brokers unreachable")
    calls: list[list[int]] = []
    began, release = threading.Event(), threading.Event()

    def fetch(keys: list[int]) -> dict[int, int]:
        calls.append(keys)
        if len(calls) == 1:
            began.set()
            assert release.wait(30)
            return {1: 1}
        if len(calls) == 2:
            raise failure
        return {key: -key for key in keys}

    lookups: GroupedLookups[int, int] = GroupedLookups(fetch)
    pool = ThreadPoolExecutor(3)
    first = pool.submit(lookups.lookup, [1])
    assert began.wait(30)
    failing = [pool.submit(lookups.lookup, [key]) for key in (2, 3)]
    wait_until(lambda: lookups.waiting == 2, 30, "two callers to wait")
    release.set()
    pool.shutdown(wait=True)
    assert first.result() == {1: 1}
    for future in failing:
        with pytest.raises(RuntimeError, match="brokers unreachable"):
            future.result()
    assert lookups.lookup([7]) == {7: -7}
    assert lookups.requests == 3


def test_keys_the_fetch_did_not_answer_are_left_out_of_the_answer() -> None:
    def answer_only_even(keys: list[int]) -> dict[int, int]:
        return {key: key for key in keys if key % 2 == 0}

    lookups = GroupedLookups(answer_only_even)
    assert lookups.lookup([1, 2]) == {2: 2}
