"""Bounded reads behind format ``millstream``: the end is fixed at planning, a quiet partition is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.model import SystemStream
from millstream.spark.sources.read_bounds import StreamReadError
from millstream.spark.sources.stream_read import OffsetRange, plan_ranges, read_range, split_range
from millstream.testing import write_stream
from tests.helpers import create_stream, job_config

IN = SystemStream("log", "in")


def offsets(config, offset_range: OffsetRange) -> list[str]:
    return [envelope.offset for batch in read_range(config, offset_range, idle_timeout=5) for envelope in batch]


def test_records_written_after_planning_are_not_read(tmp_path: Path):
    config = Settings.of(job_config(tmp_path))
    create_stream(config, IN.stream, 1)
    write_stream(config, IN, [("k", i) for i in range(3)])
    (planned,) = plan_ranges(config, IN, None, None)
    write_stream(config, IN, [("k", i) for i in range(3, 6)])
    assert offsets(config, planned) == ["0", "1", "2"]


def test_a_partition_that_stops_before_the_end_of_its_range_is_an_error_naming_it(tmp_path: Path):
    config = Settings.of(job_config(tmp_path))
    create_stream(config, IN.stream, 1)
    write_stream(config, IN, [("k", 0)])
    never_written = OffsetRange(IN.partition(0), "0", "5", end_inclusive=True)
    with pytest.raises(StreamReadError, match=r"SystemStreamPartition \[log, in, 0\].*after offset '0'.*'5'"):
        list(read_range(config, never_written, idle_timeout=0.3))


def test_max_records_cuts_a_range_into_pieces_that_cover_it_once(tmp_path: Path):
    config = Settings.of(job_config(tmp_path))
    create_stream(config, IN.stream, 1)
    write_stream(config, IN, [("k", i) for i in range(7)])
    pieces = plan_ranges(config, IN, max_records=3)
    assert [(p.start, p.end, p.end_inclusive) for p in pieces] == [
        ("0", "3", False),
        ("3", "6", False),
        ("6", "6", True),
    ]
    assert [offset for piece in pieces for offset in offsets(config, piece)] == [str(i) for i in range(7)]


def test_a_range_whose_offsets_are_not_integers_is_not_cut():
    whole = OffsetRange(IN.partition(0), "shard-1:5", "shard-1:9", end_inclusive=True)
    assert split_range(whole, 1) == [whole]
