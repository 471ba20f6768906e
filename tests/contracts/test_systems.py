"""Helpers every connector's batch path shares."""

from __future__ import annotations

import pytest

from millstream.contracts.systems import all_bytes_or_none, all_none


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], True), ([None], True), ((None, None, None), True), ([None, b"k"], False), ([b"k", None], False)],
)
def test_all_none_holds_only_when_no_value_is_set(values: list[bytes | None], expected: bool) -> None:
    assert all_none(values) is expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], True), ([b"a", None, b""], True), ([b"a", "text"], False), ([bytearray(b"a")], False)],
)
def test_all_bytes_or_none_refuses_anything_but_bytes_and_none(values: list[object], expected: bool) -> None:
    assert all_bytes_or_none(values) is expected
