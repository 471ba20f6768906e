"""The peer benchmark counts a contender's figures only after its output checks out: these protect the
checks themselves, so a contender that drops, duplicates or miscounts is named, not timed."""

from __future__ import annotations

import pytest

from benchmarks.peers.verify import (
    OutputMismatchError,
    OutputRecord,
    expected_counts,
    key_bytes,
    verify_counts,
    verify_passthrough,
)


def records(pairs: list[tuple[bytes, bytes]]) -> list[OutputRecord]:
    return [OutputRecord(key, value, 1_000 + offset, 0, offset) for offset, (key, value) in enumerate(pairs)]


def test_expected_counts_spread_the_remainder_over_the_first_keys():
    assert expected_counts(7, 3) == {key_bytes(0): 3, key_bytes(1): 2, key_bytes(2): 2}


def test_a_complete_passthrough_passes_and_a_lost_message_names_its_key():
    expected = expected_counts(4, 2)
    complete = records([(key_bytes(0), b"a"), (key_bytes(1), b"b"), (key_bytes(0), b"c"), (key_bytes(1), b"d")])
    verify_passthrough("out", complete, expected)
    moved = [*complete[:3], OutputRecord(key_bytes(0), b"d", 0, 0, 3)]
    with pytest.raises(OutputMismatchError, match=r"out: key b'key-000000' has 3 messages, expected 2"):
        verify_passthrough("out", moved, expected)
    with pytest.raises(OutputMismatchError, match=r"out: 3 messages, expected 4"):
        verify_passthrough("out", complete[:3], expected)


def test_counts_must_run_from_one_to_each_keys_total_once_each():
    expected = expected_counts(4, 2)
    good = records([(key_bytes(0), b"1"), (key_bytes(1), b"1"), (key_bytes(1), b"2"), (key_bytes(0), b"2")])
    verify_counts("out", good, expected)
    repeated = records([(key_bytes(0), b"1"), (key_bytes(1), b"1"), (key_bytes(1), b"2"), (key_bytes(0), b"1")])
    with pytest.raises(OutputMismatchError, match=r"key b'key-000000' counted 1, 1, expected 1..2"):
        verify_counts("out", repeated, expected)


def test_a_value_that_is_not_a_count_names_its_partition_and_offset():
    bad = records([(key_bytes(0), b"1"), (key_bytes(0), b"{'count': 2}")])
    with pytest.raises(OutputMismatchError, match=r"out partition 0 offset 1: key b'key-000000'.*not a count"):
        verify_counts("out", bad, expected_counts(2, 1))
