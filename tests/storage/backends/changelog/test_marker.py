"""The changelog backend's markers in Samza's formats (KafkaStateCheckpointMarker and V1 entries)."""

from __future__ import annotations

import orjson
import pytest

from millstream.checkpoint.checkpoint import CheckpointFormatError, CheckpointId
from millstream.model import SystemStreamPartition
from millstream.storage.backends.changelog.marker import ChangelogStateCheckpointMarker, parse_v1_entry, v1_entry

SSP = SystemStreamPartition("kafka", "store-changelog", 3)


def test_marker_is_samzas_kafka_state_checkpoint_marker_json() -> None:
    text = ChangelogStateCheckpointMarker(SSP, "17").to_string()
    assert orjson.loads(text) == {
        "version": 1,
        "changelog-ssp": {"system": "kafka", "stream": "store-changelog", "partition": 3, "keyBucket": -1},
        "changelog-offset": "17",
    }
    assert ChangelogStateCheckpointMarker.parse(text) == ChangelogStateCheckpointMarker(SSP, "17")


def test_marker_keeps_a_null_offset() -> None:
    marker = ChangelogStateCheckpointMarker(SSP, None)
    assert ChangelogStateCheckpointMarker.parse(marker.to_string()).changelog_offset is None


@pytest.mark.parametrize("text", ["", "{bad", '{"version": 2}', '{"version": 1, "changelog-ssp": {}}'])
def test_bad_markers_raise_naming_where(text: str) -> None:
    with pytest.raises(CheckpointFormatError, match="store 'counts'"):
        ChangelogStateCheckpointMarker.parse(text, "store 'counts'")


def test_v1_entries_are_id_colon_offset() -> None:
    checkpoint_id = CheckpointId(1617000000000, 5)
    assert v1_entry(checkpoint_id, "17") == "1617000000000-5:17"
    assert v1_entry(checkpoint_id, None) == "1617000000000-5:null"
    assert parse_v1_entry("1617000000000-5:17") == (checkpoint_id, "17")
    assert parse_v1_entry("1617000000000-5:null") == (checkpoint_id, None)
    assert parse_v1_entry("42") == (None, "42")
    with pytest.raises(CheckpointFormatError):
        parse_v1_entry("x:1")
