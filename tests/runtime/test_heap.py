"""The container's start-up heap is frozen out of the cyclic garbage collector while its tasks run
(``millstream/runtime/heap.py``), and unfrozen when the last container of the process ends."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from millstream.runtime.heap import start_up_heap_frozen
from millstream.testing import TestRunner
from tests.jobs import ReportsFrozenHeap


class Node:
    """A tracked object that can join a reference cycle."""

    other: Node | None = None


def _tracked(obj: object) -> bool:
    """Whether a collection would visit ``obj``: frozen objects are in none of the collector's generations."""
    return any(candidate is obj for candidate in gc.get_objects())


@pytest.fixture
def collector_off() -> Iterator[None]:
    """No automatic collection during the test: only an explicit one frees a cycle."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_what_is_alive_on_entry_is_frozen_until_exit_and_collected_as_before_after_it():
    alive = [Node()]
    assert gc.get_freeze_count() == 0
    with start_up_heap_frozen():
        assert gc.get_freeze_count() > 0
        assert not _tracked(alive)
        made_while_frozen = [Node()]
        assert _tracked(made_while_frozen)
    assert gc.get_freeze_count() == 0
    assert _tracked(alive)


def test_the_start_ups_garbage_cycles_are_collected_before_the_freeze_so_none_is_kept(collector_off):
    first, second = Node(), Node()
    first.other, second.other = second, first
    cycle = weakref.ref(first)
    del first, second
    assert cycle() is not None  # no collection has run: only the cycle keeps it
    with start_up_heap_frozen():
        assert cycle() is None


def test_the_heap_stays_frozen_until_the_last_container_of_the_process_ends():
    first = start_up_heap_frozen()
    second = start_up_heap_frozen()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_freeze_count() > 0, "the second container still runs"
    second.__exit__(None, None, None)
    assert gc.get_freeze_count() == 0


def test_disabled_it_leaves_the_collector_alone():
    with start_up_heap_frozen(enabled=False):
        assert gc.get_freeze_count() == 0


def _frozen_counts(config: dict[str, object]) -> list[int]:
    """What each of 40 messages saw frozen, processed by two containers of two tasks each, which freeze their heap
    unless ``config`` says otherwise (the minimum of tasks is 1 here)."""
    inputs = [(f"k{i}", i) for i in range(40)]
    runner = TestRunner(ReportsFrozenHeap, {"job.container.count": 2, "job.container.gc.freeze.min.tasks": 1, **config})
    result = runner.add_input("in", inputs, partitions=4).run()
    assert result.job.outcome == "finished"
    assert sorted(value["v"] for _, value in result.output("out")) == list(range(40))
    return [value["frozen"] for _, value in result.output("out")]


def test_two_containers_process_every_message_with_their_start_up_heap_frozen_and_unfreeze_it_when_they_end():
    assert all(frozen > 0 for frozen in _frozen_counts({}))
    assert gc.get_freeze_count() == 0


def test_job_container_gc_freeze_enabled_false_runs_the_tasks_with_nothing_frozen():
    assert _frozen_counts({"job.container.gc.freeze.enabled": "false"}) == [0] * 40


def test_a_container_of_fewer_tasks_than_job_container_gc_freeze_min_tasks_leaves_the_collector_alone():
    assert _frozen_counts({"job.container.gc.freeze.min.tasks": 3}) == [0] * 40
