"""``spark.readStream.format("millstream")`` over the embedded log on Spark local mode: availableNow runs of one
query read the stream exactly once across runs, and a startpoint moves the query without touching its
checkpoint, once."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
import yaml
from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql.streaming.datasource import ReadAllAvailable

from millstream.config import Config
from millstream.contracts.startpoints import StartpointSpecific
from millstream.model import SystemStream
from millstream.spark.sources.batch_reader import StreamInputPartition
from millstream.spark.sources.datasource import MillstreamDataSource
from millstream.spark.sources.stream_read import OffsetRange, StreamReadError
from millstream.spark.sources.streaming_source import MillstreamStreamReader
from millstream.startpoint.tools import list_startpoints, set_startpoints
from millstream.testing import write_stream
from tests.helpers import create_stream, job_config, wait_until
from tests.spark.streaming import run_available_now

pytestmark = pytest.mark.spark

QUERY_JOB = "audit"
"""The job named by option ``job``, whose metadata store holds the query's startpoints."""


@pytest.fixture
def stream(tmp_path: Path) -> tuple[Path, Config]:
    config = job_config(tmp_path)
    create_stream(config, "in", 2)
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    return config_file, config


def append(config: Config, partition: int, values: range) -> None:
    write_stream(config, SystemStream("log", "in"), [(f"k{partition}", v) for v in values], partition=partition)


def test_available_now_runs_read_every_record_once_across_runs_with_appends_between(
    spark_local, stream, tmp_path: Path
):
    config_file, config = stream
    checkpoint = tmp_path / "query-checkpoint"
    for partition in range(2):
        append(config, partition, range(0, 3))
    first = run_available_now(spark_local, config_file, "log.in", checkpoint, QUERY_JOB)
    assert first == [(p, v) for p in range(2) for v in range(0, 3)]

    for partition in range(2):
        append(config, partition, range(3, 5))
    second = run_available_now(spark_local, config_file, "log.in", checkpoint, QUERY_JOB)
    assert second == [(p, v) for p in range(2) for v in range(3, 5)]


def test_a_startpoint_set_between_runs_moves_the_next_run_not_the_checkpoint_and_is_deleted(
    spark_local, stream, tmp_path: Path
):
    config_file, config = stream
    checkpoint = tmp_path / "query-checkpoint"
    for partition in range(2):
        append(config, partition, range(0, 4))
    assert len(run_available_now(spark_local, config_file, "log.in", checkpoint, QUERY_JOB)) == 8

    for partition in range(2):
        append(config, partition, range(4, 6))
    query_job = config.with_overrides({"job.name": QUERY_JOB})
    set_startpoints(query_job, "log.in", StartpointSpecific("1"), partitions=[0])

    moved = run_available_now(spark_local, config_file, "log.in", checkpoint, QUERY_JOB)
    assert moved == [(0, v) for v in range(1, 6)] + [(1, v) for v in range(4, 6)]
    assert list_startpoints(query_job).pending == []

    append(config, 0, range(6, 7))
    assert run_available_now(spark_local, config_file, "log.in", checkpoint, QUERY_JOB) == [(0, 6)]


def test_a_startpoint_of_another_job_does_not_move_the_query(stream):
    config_file, config = stream
    append(config, 0, range(0, 3))
    set_startpoints(config, "log.in", StartpointSpecific("2"), partitions=[0])
    reader = stream_reader(config_file, job=QUERY_JOB)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["startpoints"] == {}
    assert offset_ranges(reader.partitions(start, end)) == [("0", "2")]
    assert len(list_startpoints(config).pending) == 1


def test_a_stream_that_does_not_exist_is_an_error_naming_it(stream):
    config_file, _ = stream
    source = MillstreamDataSource({"config": str(config_file), "stream": "log.missing"})
    with pytest.raises(StreamReadError, match=r"log\.missing"):
        source.streamReader(source.schema()).initialOffset()


def test_a_running_query_jumps_to_a_startpoint_at_its_next_micro_batch(spark_local, stream, tmp_path: Path):
    config_file, config = stream
    append(config, 0, range(0, 3))
    rows: list[tuple[int, int]] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        rows.extend((row.partition, orjson.loads(row.value)) for row in batch.collect())

    df = (
        spark_local.readStream.format("millstream")
        .option("config", str(config_file))
        .option("stream", "log.in")
        .option("job", QUERY_JOB)
        .load()
    )
    query = (
        df.writeStream.trigger(processingTime="200 milliseconds")
        .option("checkpointLocation", str(tmp_path / "query-checkpoint"))
        .foreachBatch(collect)
        .start()
    )
    query_job = config.with_overrides({"job.name": QUERY_JOB})
    try:
        wait_until(lambda: len(rows) == 3, 120, "the running query read the first three records")
        set_startpoints(query_job, "log.in", StartpointSpecific("1"), partitions=[0])
        wait_until(lambda: len(rows) == 5, 120, "the running query read from the startpoint again")
        wait_until(lambda: not list_startpoints(query_job).pending, 60, "the applied startpoint was deleted")
        append(config, 0, range(3, 4))
        wait_until(lambda: len(rows) == 6, 120, "the running query read the record appended after the jump")
    finally:
        query.stop()
    assert rows == [(0, 0), (0, 1), (0, 2), (0, 1), (0, 2), (0, 3)]


def test_a_batch_replayed_after_its_startpoint_was_deleted_reads_the_same_range(stream):
    """Spark re-plans an unfinished batch from its offset log: the startpoint recorded in the batch's end offset
    still moves it, though the startpoint itself is gone from the metadata store."""
    config_file, config = stream
    append(config, 0, range(0, 4))
    reader = stream_reader(config_file, job=QUERY_JOB)
    start = reader.latestOffset(reader.initialOffset(), ReadAllAvailable())
    query_job = config.with_overrides({"job.name": QUERY_JOB})
    set_startpoints(query_job, "log.in", StartpointSpecific("2"), partitions=[0])
    end = reader.latestOffset(start, ReadAllAvailable())
    planned = reader.partitions(start, end)
    reader.commit(end)
    assert not list_startpoints(query_job).pending

    replayed = reader.partitions(start, end)
    assert replayed == planned
    assert offset_ranges(replayed) == [("2", "3")]
    assert reader.latestOffset(end, ReadAllAvailable()) == end


def test_a_reader_plans_every_batch_with_settings_built_once_and_ships_only_its_options(stream):
    """The reader lives for the query, planning batch after batch: it reads the job's settings (the views of
    the startpoints' metadata store, the system's) parsed once, not once per batch; Spark ships it to its
    workers as its options, which each worker turns into settings of its own."""
    config_file, config = stream
    append(config, 0, range(0, 3))
    reader = stream_reader(config_file, job=QUERY_JOB)
    settings, startpoints = reader.config, reader._stream_config
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.commit(reader.latestOffset(end, ReadAllAvailable()))
    assert reader.config is settings and reader._stream_config is startpoints
    assert startpoints["job.name"] == QUERY_JOB and settings["job.name"] == config["job.name"]
    shipped = cloudpickle.loads(cloudpickle.dumps(reader))
    assert "_stream_config" not in vars(shipped) and "settings" not in vars(shipped.options)
    assert offset_ranges(shipped.partitions(start, end)) == [("0", "2")]


def stream_reader(config_file: Path, **options: str) -> MillstreamStreamReader:
    source = MillstreamDataSource({"config": str(config_file), "stream": "log.in", **options})
    reader = source.streamReader(source.schema())
    assert isinstance(reader, MillstreamStreamReader)
    return reader


def test_a_new_query_starts_where_starting_offsets_say(stream):
    config_file, config = stream
    for partition in range(2):
        append(config, partition, range(0, 3))
    assert stream_reader(config_file).initialOffset()["offsets"] == {"0": "0", "1": "0"}
    assert stream_reader(config_file, startingoffsets="latest").initialOffset()["offsets"] == {"0": "3", "1": "3"}
    per_partition = stream_reader(config_file, startingoffsets='{"1": "2", "0": -1}')
    assert per_partition.initialOffset()["offsets"] == {"0": "3", "1": "2"}
    with pytest.raises(StreamReadError, match=r"partition\(s\) \[5\]"):
        stream_reader(config_file, startingoffsets='{"5": "0"}').initialOffset()
    with pytest.raises(StreamReadError, match="option 'startingOffsets'"):
        stream_reader(config_file, startingoffsets="yesterday")


def offset_ranges(partitions: Sequence[object]) -> list[tuple[str | None, str | None]]:
    """The (start, end) of each log partition's planned range."""
    return [
        (p.range.start, p.range.end)
        for p in partitions
        if isinstance(p, StreamInputPartition) and isinstance(p.range, OffsetRange)
    ]
