"""Checkpoint V1 is Samza's JSON document, byte for byte, and reads back what it wrote."""

from __future__ import annotations

import itertools

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


# --- CheckpointId, CheckpointV2, serdes per version, and choosing among versions ---

from millstream.checkpoint.checkpoint import (  # noqa: E402
    CHECKPOINT_SERDES,
    CHECKPOINT_TYPES,
    Checkpoint,
    CheckpointId,
    CheckpointV2,
    deserialize_checkpoint,
    select_checkpoint,
    serialize_checkpoint,
    version_of_type,
)

SAMZA_V2_EXAMPLE = (
    b'{"checkpoint-id":"1617000000000-123456","input-offsets":{"kafka.in.0":"42"},'
    b'"state-checkpoint-markers":{"org.apache.samza.storage.KafkaChangelogStateBackendFactory":{"store1":"scm"},'
    b'"org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory":{"store2":"blob-1"}}}'
)


def test_checkpoint_id_is_millis_dash_seq_and_parses_back() -> None:
    checkpoint_id = CheckpointId(1617000000000, 123456)
    assert str(checkpoint_id) == "1617000000000-123456"
    assert CheckpointId.parse("1617000000000-123456") == checkpoint_id


@pytest.mark.parametrize("text", ["", " ", "abc", "1617000000000", "1617000000000-", "-5", "1-x", "x-1", "1-2-3"])
def test_checkpoint_id_rejects_blank_and_non_numeric_text(text: str) -> None:
    with pytest.raises(CheckpointFormatError, match="CheckpointId"):
        CheckpointId.parse(text)


def test_checkpoint_ids_order_by_millis_then_seq() -> None:
    ids = [CheckpointId(2, 0), CheckpointId(1, 999), CheckpointId(1, 5)]
    assert sorted(ids) == [CheckpointId(1, 5), CheckpointId(1, 999), CheckpointId(2, 0)]


def test_created_checkpoint_ids_strictly_increase_even_when_the_clock_stands_still() -> None:
    ids = [CheckpointId.create(now_ms=1_000) for _ in range(1000)]
    assert all(a < b for a, b in itertools.pairwise(ids))


def test_v2_reads_samzas_document() -> None:
    checkpoint = CheckpointV2.from_bytes(SAMZA_V2_EXAMPLE)
    assert checkpoint.checkpoint_id == CheckpointId(1617000000000, 123456)
    assert dict(checkpoint.input_offsets) == {SystemStreamPartition("kafka", "in", 0): "42"}
    assert checkpoint.offsets == checkpoint.input_offsets
    assert checkpoint.state_checkpoint_markers["org.apache.samza.storage.blobstore.BlobStoreStateBackendFactory"] == {
        "store2": "blob-1"
    }


def test_v2_writes_samzas_document_byte_for_byte() -> None:
    assert CheckpointV2.from_bytes(SAMZA_V2_EXAMPLE).to_bytes() == SAMZA_V2_EXAMPLE


def test_v2_ignores_unknown_fields_and_keeps_null_offsets() -> None:
    document = b'{"checkpoint-id":"1-2","input-offsets":{"log.in.3":null},"state-checkpoint-markers":{},"x":1}'
    checkpoint = CheckpointV2.from_bytes(document)
    assert dict(checkpoint.input_offsets) == {SystemStreamPartition("log", "in", 3): None}


def test_v2_maps_are_read_only() -> None:
    checkpoint = CheckpointV2(CheckpointId(1, 1), {SystemStreamPartition("log", "in", 0): "1"}, {"b": {"s": "m"}})
    with pytest.raises(TypeError):
        checkpoint.input_offsets[SystemStreamPartition("log", "in", 1)] = "2"  # type: ignore[index]
    with pytest.raises(TypeError):
        checkpoint.state_checkpoint_markers["b"]["s"] = "x"  # type: ignore[index]


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b"{}",
        b'{"checkpoint-id":"nope","input-offsets":{},"state-checkpoint-markers":{}}',
        b'{"checkpoint-id":"1-1","input-offsets":{"bad":"1"},"state-checkpoint-markers":{}}',
        b'{"checkpoint-id":"1-1","input-offsets":{"log.in.0":5},"state-checkpoint-markers":{}}',
        b'{"checkpoint-id":"1-1","input-offsets":{},"state-checkpoint-markers":{"b":{"s":1}}}',
    ],
)
def test_malformed_v2_raises_checkpoint_format_error_naming_where(data: bytes) -> None:
    with pytest.raises(CheckpointFormatError, match=r"task 'Partition 0'.*V2"):
        CheckpointV2.from_bytes(data, where="task 'Partition 0'")


def test_each_version_has_its_serde_and_record_type() -> None:
    v1 = CheckpointV1({SystemStreamPartition("log", "in", 0): "1"})
    v2 = CheckpointV2(CheckpointId(5, 6), {SystemStreamPartition("log", "in", 0): "1"}, {"b": {"s": "m"}})
    for checkpoint in (v1, v2):
        data = serialize_checkpoint(checkpoint)
        assert data == CHECKPOINT_SERDES[checkpoint.version].to_bytes(checkpoint)
        assert deserialize_checkpoint(checkpoint.version, data) == checkpoint
    assert CHECKPOINT_TYPES == {1: "checkpoint", 2: "checkpoint-v2"}
    assert version_of_type("checkpoint-v2") == 2 and version_of_type("checkpoint-v9") is None
    with pytest.raises(CheckpointFormatError, match="unknown checkpoint version 3"):
        deserialize_checkpoint(3, b"{}")


V1_CHECKPOINT = CheckpointV1({SystemStreamPartition("log", "in", 0): "10"})
V2_CHECKPOINT = CheckpointV2(CheckpointId(1, 1), {SystemStreamPartition("log", "in", 0): "5"})


def test_select_prefers_the_first_read_version_when_both_are_live() -> None:
    candidates: list[tuple[Checkpoint, int]] = [(V1_CHECKPOINT, 1000), (V2_CHECKPOINT, 1001)]
    assert select_checkpoint(candidates, [2, 1], 600_000) is V2_CHECKPOINT
    assert select_checkpoint(candidates, [1, 2], 600_000) is V1_CHECKPOINT
    assert select_checkpoint([(V2_CHECKPOINT, 1000), (V1_CHECKPOINT, 1001)], [2, 1], 600_000) is V2_CHECKPOINT


def test_select_ignores_versions_not_read() -> None:
    candidates: list[tuple[Checkpoint, int]] = [(V1_CHECKPOINT, 1000), (V2_CHECKPOINT, 1001)]
    assert select_checkpoint(candidates, [1], 600_000) is V1_CHECKPOINT
    assert select_checkpoint(candidates, [2], 600_000) is V2_CHECKPOINT
    assert select_checkpoint([(V1_CHECKPOINT, 1)], [2], 600_000) is None


def test_a_stale_preferred_version_loses_to_a_newer_lower_one_beyond_the_max_age() -> None:
    stale_v2_then_live_v1: list[tuple[Checkpoint, int]] = [(V2_CHECKPOINT, 1000), (V1_CHECKPOINT, 1000 + 600_001)]
    assert select_checkpoint(stale_v2_then_live_v1, [2, 1], 600_000) is V1_CHECKPOINT
    within_age: list[tuple[Checkpoint, int]] = [(V2_CHECKPOINT, 1000), (V1_CHECKPOINT, 1000 + 600_000)]
    assert select_checkpoint(within_age, [2, 1], 600_000) is V2_CHECKPOINT
    assert select_checkpoint([(V2_CHECKPOINT, 0), (V1_CHECKPOINT, 1)], [2, 1], 0) is V1_CHECKPOINT


def test_select_needs_at_least_one_read_version() -> None:
    with pytest.raises(ValueError, match="read_versions"):
        select_checkpoint([], [], 0)
