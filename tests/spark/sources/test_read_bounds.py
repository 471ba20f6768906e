"""The range options of format ``millstream`` turned into startpoints, and refused with the option named."""

from __future__ import annotations

import pytest

from millstream.contracts.startpoints import (
    StartpointSpecific,
    StartpointTimestamp,
)
from millstream.spark.sources.read_bounds import ReadBounds, StreamReadError, parse_bounds, parse_offsets


def kinds(bounds: ReadBounds) -> tuple[object, ...]:
    def plain(startpoint: object) -> object:
        if isinstance(startpoint, StartpointSpecific):
            return startpoint.specific_offset
        if isinstance(startpoint, StartpointTimestamp):
            return ("timestamp", startpoint.timestamp_offset)
        return type(startpoint).__name__.removeprefix("Startpoint").lower()

    return (
        plain(bounds.start),
        {p: plain(s) for p, s in bounds.starts.items()},
        plain(bounds.end),
        {p: plain(s) for p, s in bounds.ends.items()},
    )


def test_without_options_a_read_runs_from_the_oldest_to_the_newest_record():
    assert kinds(parse_bounds({})) == ("oldest", {}, "upcoming", {})


def test_spark_kafka_offsets_json_takes_minus_two_as_earliest_and_minus_one_as_latest():
    bounds = parse_bounds({"startingoffsets": '{"0": 10, "1": -2, "2": "7"}', "endingoffsets": '{"0": -1, "1": 4}'})
    assert kinds(bounds) == ("oldest", {0: "10", 1: "oldest", 2: "7"}, "upcoming", {0: "upcoming", 1: "4"})


def test_the_words_earliest_and_latest_bound_every_partition():
    assert kinds(parse_bounds({"startingoffsets": "latest", "endingoffsets": "earliest"}))[::2] == (
        "upcoming",
        "oldest",
    )


def test_timestamps_are_epoch_ms_or_iso_8601():
    bounds = parse_bounds({"startingtimestamp": "1700000000000", "endingtimestamp": "2023-11-14T22:13:21Z"})
    assert kinds(bounds)[::2] == (("timestamp", 1_700_000_000_000), ("timestamp", 1_700_000_001_000))


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("oldest", ("oldest", {})),
        ("upcoming", ("upcoming", {})),
        ("timestamp:1700000000000", (("timestamp", 1_700_000_000_000), {})),
        ("timestamp:2023-11-14T22:13:20Z", (("timestamp", 1_700_000_000_000), {})),
        ("offset:0=5, 2=9", ("oldest", {0: "5", 2: "9"})),
    ],
)
def test_from_takes_the_startpoint_choices_of_the_cli(spec: str, expected: tuple[object, object]):
    assert kinds(parse_bounds({"from": spec}))[:2] == expected


@pytest.mark.parametrize("spec", ["newest-ish", "timestamp:yesterday", "offset:a=1", "offset:0", "offset:"])
def test_a_from_spec_that_is_not_a_startpoint_is_refused_naming_the_option(spec: str):
    with pytest.raises(StreamReadError, match="option 'from'"):
        parse_bounds({"from": spec})


def test_two_options_giving_the_start_are_refused_naming_both():
    with pytest.raises(StreamReadError, match=r"\['from', 'startingTimestamp'\]"):
        parse_bounds({"from": "oldest", "startingtimestamp": "1"})


@pytest.mark.parametrize("text", ['{"a": "1"}', "[1]", "{not json", '{"0": null}', '{"0": true}'])
def test_offset_options_that_do_not_map_partitions_to_offsets_are_refused(text: str):
    with pytest.raises(StreamReadError, match="startingOffsets"):
        parse_offsets(text, "startingOffsets")


def test_bounds_naming_a_partition_the_stream_lacks_are_refused_naming_option_partition_and_stream():
    bounds = parse_bounds({"endingoffsets": '{"0": 1, "4": 2}'})
    with pytest.raises(StreamReadError, match=r"'endingOffsets' names partition\(s\) \[4\] of stream 'log.x'"):
        bounds.check_partitions("log.x", {0, 1})
