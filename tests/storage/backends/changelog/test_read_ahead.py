"""Reading a changelog ahead of its replay on a thread of its own: order, errors, and an early stop."""

from __future__ import annotations

import threading
from collections.abc import Generator

import pytest

from millstream.storage.backends.changelog.read_ahead import read_ahead


class Source:
    """A generator of ``count`` numbers that records the threads it ran and was closed on."""

    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.count = count
        self.fail_at = fail_at
        self.threads: set[str] = set()
        self.closed_on: str | None = None

    def items(self) -> Generator[int, None, None]:
        try:
            for item in range(self.count):
                self.threads.add(threading.current_thread().name)
                if item == self.fail_at:
                    raise ValueError(f"cannot read item {item}")
                yield item
        finally:
            self.closed_on = threading.current_thread().name


def test_every_item_comes_in_order_read_on_the_named_thread_alone() -> None:
    source = Source(1000)
    assert list(read_ahead(source.items(), 2, "reader")) == list(range(1000))
    assert source.threads == {"reader"} and source.closed_on == "reader"


def test_an_error_of_the_source_is_raised_to_the_reader_after_the_items_before_it() -> None:
    source = Source(100, fail_at=30)
    seen: list[int] = []
    with pytest.raises(ValueError, match="cannot read item 30"):
        for item in read_ahead(source.items(), 4, "reader"):
            seen.append(item)
    assert seen == list(range(30))
    assert source.closed_on == "reader"


def test_closing_the_reader_early_stops_the_thread_and_closes_the_source_on_it() -> None:
    source = Source(10_000)
    reader = read_ahead(source.items(), 2, "reader-early")
    assert [next(reader) for _ in range(5)] == list(range(5))
    reader.close()
    assert source.closed_on == "reader-early"
    assert "reader-early" not in {thread.name for thread in threading.enumerate()}


def test_an_error_in_the_readers_loop_stops_the_thread_too() -> None:
    source = Source(10_000)
    with pytest.raises(RuntimeError, match="replay failed"):
        for item in read_ahead(source.items(), 2, "reader-failing"):
            if item == 3:
                raise RuntimeError("replay failed")
    assert source.closed_on == "reader-failing"
    assert "reader-failing" not in {thread.name for thread in threading.enumerate()}
