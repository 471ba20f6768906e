"""Which small table files a RocksDB store merges once it holds more than ``SMALL_TABLES_MAX`` small files: all of a
store whose files are all small; in a store with large files, runs of adjacent small files on its bottom level,
never the large files there, and nothing of the levels above on their own."""

from __future__ import annotations

from typing import Any

from millstream.storage.small_tables import SMALL_TABLE_BYTES, SMALL_TABLES_MAX, ranges_to_merge

SMALL, LARGE = 1_000, SMALL_TABLE_BYTES


def table(level: int, start: int, end: int, size: int = SMALL) -> dict[str, Any]:
    return {"level": level, "start_key": b"%04d" % start, "end_key": b"%04d" % end, "size": size}


def test_small_files_up_to_the_bound_are_left_as_they_are() -> None:
    assert ranges_to_merge([table(6, key, key) for key in range(SMALL_TABLES_MAX)]) == []


def test_a_store_of_small_files_only_is_merged_whole_level_0_included() -> None:
    files = [table(6, key, key) for key in reversed(range(1, SMALL_TABLES_MAX))] + [table(0, 40, 50), table(0, 0, 45)]
    assert ranges_to_merge(files) == [(b"0000", b"0050")]


def test_a_large_file_splits_the_runs_and_is_outside_both() -> None:
    files = [table(6, key, key) for key in range(10)] + [table(6, 10, 19, LARGE)]
    files += [table(6, key, key) for key in reversed(range(20, 30))]
    assert ranges_to_merge(files) == [(b"0000", b"0009"), (b"0020", b"0029")]


def test_single_small_files_between_large_ones_and_small_files_above_the_bottom_level_are_not_merged() -> None:
    files = [table(0, 0, 99) for _ in range(SMALL_TABLES_MAX + 1)] + [table(6, 0, 99, LARGE)]
    assert ranges_to_merge(files) == []
    scattered = [file for key in range(0, 40, 2) for file in (table(6, key, key), table(6, key + 1, key + 1, LARGE))]
    assert ranges_to_merge(scattered) == []
    above = [table(5, key, key) for key in range(9)] + [table(6, 9, 99, LARGE)]
    assert ranges_to_merge(above) == []
