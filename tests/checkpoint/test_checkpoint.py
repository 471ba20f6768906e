"""Checkpoint V1 is Samza's JSON document, byte for byte, and reads back what it wrote."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.checkpoint.checkpoint import CheckpointFormatError, CheckpointV1
from millstream.model import SystemStreamPartition

SAMZA_EXAMPLE = (
    b'{"SystemStreamPartition [kafka, in, 0]":{"system":"kafka","stream":"in","partition":"0","offset":"42"}}'
)


def test_v1_writes_samzas_document_byte_for_byte() -> None:
    checkpoint = CheckpointV1({SystemStreamPartition("kafka", "in", 0): "42"})
    assert checkpoint.to_bytes() == SAMZA_EXAMPLE


def test_v1_reads_samzas_document() -> None:
    assert CheckpointV1.from_bytes(SAMZA_EXAMPLE).offsets == {SystemStreamPartition("kafka", "in", 0): "42"}


def test_v1_ignores_the_outer_keys_on_read() -> None:
    document = b'{"whatever":{"system":"kafka","stream":"in","partition":"3","offset":"7"}}'
    assert CheckpointV1.from_bytes(document).offsets == {SystemStreamPartition("kafka", "in", 3): "7"}


def test_v1_keeps_null_offsets() -> None:
    checkpoint = CheckpointV1({SystemStreamPartition("kafka", "in", 1): None})
    assert b'"offset":null' in checkpoint.to_bytes()
    assert CheckpointV1.from_bytes(checkpoint.to_bytes()) == checkpoint


def test_v1_keeps_changelog_offsets_with_their_checkpoint_id() -> None:
    changelog = SystemStreamPartition("kafka", "store-changelog", 0)
    checkpoint = CheckpointV1({changelog: "1617000000000-123456:17", SystemStreamPartition("kafka", "in", 0): "5"})
    assert CheckpointV1.from_bytes(checkpoint.to_bytes()) == checkpoint


def test_v1_entries_are_written_in_partition_order() -> None:
    ssps = [SystemStreamPartition("log", "in", p) for p in (2, 0, 1)]
    document = orjson.loads(CheckpointV1({ssp: "1" for ssp in ssps}).to_bytes())
    assert [entry["partition"] for entry in document.values()] == ["0", "1", "2"]


def test_empty_checkpoint_is_an_empty_object() -> None:
    assert CheckpointV1().to_bytes() == b"{}"
    assert CheckpointV1.from_bytes(b"{}") == CheckpointV1()


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"",
        b"[1, 2]",
        b'{"x": 1}',
        b'{"x": {"system": "kafka", "stream": "in"}}',
        b'{"x": {"system": "kafka", "stream": "in", "partition": "zero", "offset": "1"}}',
        b"\xff\xfe",
    ],
)
def test_malformed_v1_raises_checkpoint_format_error_naming_where(data: bytes) -> None:
    with pytest.raises(CheckpointFormatError, match="task 'Partition 0'"):
        CheckpointV1.from_bytes(data, where="task 'Partition 0'")


names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=20)
ssps = st.builds(SystemStreamPartition, names, names, st.integers(min_value=0, max_value=10_000))
offsets = st.one_of(st.none(), st.text(st.characters(codec="utf-8"), max_size=30))


@given(st.dictionaries(ssps, offsets, max_size=8))
def test_v1_round_trips_any_offsets(entries: dict[SystemStreamPartition, str | None]) -> None:
    checkpoint = CheckpointV1(entries)
    assert CheckpointV1.from_bytes(checkpoint.to_bytes()) == checkpoint
