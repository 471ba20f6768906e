"""``spark.readStream.format("millstream")`` over Kinesis (kinesalite) on Spark local mode: availableNow runs
of one query read every record once across a shard split, parents before children, and a startpoint moves
the query between runs, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from pyspark.sql import DataFrame, SparkSession

from millstream.config import Config
from millstream.contracts.startpoints import StartpointOldest, StartpointSpecific
from millstream.spark.sources.shard_stream import ShardedStreamReader
from millstream.spark.sources.stream_read import StreamReadError
from millstream.spark.sources.streaming_source import stream_reader
from millstream.startpoint.tools import list_startpoints, set_startpoints
from tests.integration.kinesis.helpers import (
    create_stream,
    kinesis_config,
    put,
    started_admin,
    wait_for_arrival_times_to_pass,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]

KEYS = {"systems__kinesis__samza__key__serde": "string"}
"""A Kinesis record's key is its partition key, text."""
QUERY_JOB = "audit"
"""The job named by option ``job``, whose metadata store holds the query's startpoints."""


def job_file(config: Config, tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    return path


def run_available_now(spark: SparkSession, config_file: Path, stream: str, checkpoint: Path) -> list[Any]:
    """One availableNow run to its end; ``(batch id, shard number, value)`` of every row in the order the sink
    received them (batch by batch, a batch's Spark partitions in order)."""
    rows: list[Any] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        rows.extend((batch_id, row.partition, orjson.loads(row.value)) for row in batch.collect())

    df = (
        spark.readStream.format("millstream")
        .option("config", str(config_file))
        .option("stream", f"kinesis.{stream}")
        .option("job", QUERY_JOB)
        .load()
    )
    query = df.writeStream.trigger(availableNow=True).option("checkpointLocation", str(checkpoint))
    running = query.foreachBatch(collect).start()
    assert running.awaitTermination(180), "the availableNow query did not end within 180 s"
    assert running.exception() is None
    return rows


def test_starting_offsets_per_partition_are_refused_naming_the_stream(kinesis_endpoint, tmp_path: Path):
    config_file = job_file(kinesis_config(kinesis_endpoint, tmp_path), tmp_path)
    options = {"config": str(config_file), "stream": "kinesis.views", "startingoffsets": '{"0": "12"}'}
    with pytest.raises(StreamReadError, match=r"'kinesis.views'.*oldest or upcoming for every shard"):
        stream_reader(options)
    assert isinstance(stream_reader({**options, "startingoffsets": "latest"}), ShardedStreamReader)


def records(numbers: range) -> list[tuple[str, bytes]]:
    return [(f"k{n % 3}", orjson.dumps({"n": n, "k": f"k{n % 3}"})) for n in numbers]


def test_two_runs_read_every_record_once_across_a_split_parents_before_children(
    spark_local, kinesis_endpoint, stream_name, tmp_path: Path
):
    stream = stream_name("views")
    create_stream(kinesis_endpoint, stream, 1)
    config = kinesis_config(kinesis_endpoint, tmp_path, systems__kinesis__samza__msg__serde="json", **KEYS)
    config_file, checkpoint = job_file(config, tmp_path), tmp_path / "query-checkpoint"
    put(kinesis_endpoint, stream, records(range(0, 9)))
    first = run_available_now(spark_local, config_file, stream, checkpoint)
    assert [value["n"] for _, _, value in first] == list(range(9))

    put(kinesis_endpoint, stream, records(range(9, 15)))
    admin = started_admin(config)
    admin.split_shard(stream, "shardId-000000000000")
    put(kinesis_endpoint, stream, records(range(15, 30)))
    wait_for_arrival_times_to_pass(kinesis_endpoint, stream)  # a run reads what arrived by its start
    second = run_available_now(spark_local, config_file, stream, checkpoint)

    assert sorted(value["n"] for _, _, value in second) == list(range(9, 30)), "no record twice, none missing"
    parent = [(batch, value["n"]) for batch, shard, value in second if shard == 0]
    children = [(batch, shard) for batch, shard, _ in second if shard != 0]
    assert [n for _, n in parent] == list(range(9, 15))
    assert {shard for _, shard in children} == {1, 2}
    assert max(batch for batch, _ in parent) < min(batch for batch, _ in children), "children after the parent"
    for key in ("k0", "k1", "k2"):
        ns = [value["n"] for _, _, value in second if value["k"] == key]
        assert ns == sorted(ns), f"key {key} out of order across the split: {ns}"


def test_a_startpoint_set_between_runs_moves_the_next_run_once(
    spark_local, kinesis_endpoint, stream_name, tmp_path: Path
):
    stream = stream_name("clicks")
    create_stream(kinesis_endpoint, stream, 1)
    config = kinesis_config(kinesis_endpoint, tmp_path, systems__kinesis__samza__msg__serde="json", **KEYS)
    config_file, checkpoint = job_file(config, tmp_path), tmp_path / "query-checkpoint"
    written = put(kinesis_endpoint, stream, records(range(0, 5)))
    assert len(run_available_now(spark_local, config_file, stream, checkpoint)) == 5

    query_job = config.with_overrides({"job.name": QUERY_JOB})
    position = f"{written[2]['ShardId']}:{written[2]['SequenceNumber']}"
    set_startpoints(query_job, f"kinesis.{stream}", StartpointSpecific(position), partitions=[0])
    put(kinesis_endpoint, stream, records(range(5, 7)))
    moved = run_available_now(spark_local, config_file, stream, checkpoint)
    assert [value["n"] for _, _, value in moved] == list(range(2, 7))
    assert list_startpoints(query_job).pending == []

    set_startpoints(query_job, f"kinesis.{stream}", StartpointOldest(), partitions=None)
    again = run_available_now(spark_local, config_file, stream, checkpoint)
    assert [value["n"] for _, _, value in again] == list(range(7)), "oldest rereads the stream"
    assert list_startpoints(query_job).pending == []
