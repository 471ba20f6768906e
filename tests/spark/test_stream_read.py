"""Bounded reads behind format ``millstream``: the end is fixed at planning, a quiet partition is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.model import SystemStream
from millstream.spark.stream_read import OffsetRange, StreamReadError, parse_offsets, plan_ranges, read_range
from millstream.testing import write_stream
from tests.helpers import create_stream, job_config

IN = SystemStream("log", "in")


def offsets(config, offset_range: OffsetRange) -> list[str]:
    return [envelope.offset for batch in read_range(config, offset_range, idle_timeout=5) for envelope in batch]


def test_records_written_after_planning_are_not_read(tmp_path: Path):
    config = job_config(tmp_path)
    create_stream(config, IN.stream, 1)
    write_stream(config, IN, [("k", i) for i in range(3)])
    (planned,) = plan_ranges(config, IN, None, None)
    write_stream(config, IN, [("k", i) for i in range(3, 6)])
    assert offsets(config, planned) == ["0", "1", "2"]


def test_a_partition_that_stops_before_the_end_of_its_range_is_an_error_naming_it(tmp_path: Path):
    config = job_config(tmp_path)
    create_stream(config, IN.stream, 1)
    write_stream(config, IN, [("k", 0)])
    never_written = OffsetRange(IN.partition(0), "0", "5", end_inclusive=True)
    with pytest.raises(StreamReadError, match=r"SystemStreamPartition \[log, in, 0\].*after offset '0'.*'5'"):
        list(read_range(config, never_written, idle_timeout=0.3))


@pytest.mark.parametrize("text", ['{"a": "1"}', "[1]", "{not json"])
def test_offset_options_that_do_not_map_partitions_to_offsets_are_refused(text: str):
    with pytest.raises(StreamReadError, match="startingOffsets"):
        parse_offsets(text, "startingOffsets")
