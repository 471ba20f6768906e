"""Format ``millstream`` over Kinesis on Spark local mode: one Spark partition per shard, closed parents
and open children alike, parents first, bounded by sequence numbers and timestamps."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from millstream.config import Config
from millstream.connectors.kinesis.shards import Shard
from millstream.contracts.startpoints import now_ms
from millstream.model import SystemStream
from millstream.spark.sources.read_bounds import ReadBounds
from millstream.spark.sources.shard_read import parents_first, plan_shard_ranges, read_shard_range
from tests.helpers import wait_until
from tests.integration.kinesis.helpers import (
    create_stream,
    kinesis_config,
    put,
    started_admin,
    wait_for_arrival_times_to_pass,
)

KEYS = {"systems__kinesis__samza__key__serde": "string"}
"""A Kinesis record's key is its partition key, text."""

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def job_file(config: Config, tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    return str(path)


def load(spark: SparkSession, config_file: str, stream: str, **options: str) -> DataFrame:
    reader = spark.read.format("millstream").option("config", config_file).option("stream", f"kinesis.{stream}")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def values(df: DataFrame) -> list[object]:
    return [orjson.loads(row.value) for row in df.collect()]


def test_a_split_stream_reads_the_closed_parent_then_its_open_children_every_record_once(
    spark_local, kinesis_endpoint, stream_name, tmp_path: Path
):
    stream = stream_name("views")
    create_stream(kinesis_endpoint, stream, 1)
    config = kinesis_config(kinesis_endpoint, tmp_path, systems__kinesis__samza__msg__serde="json", **KEYS)
    put(kinesis_endpoint, stream, [(f"k{i % 5}", orjson.dumps({"n": i, "k": f"k{i % 5}"})) for i in range(20)])
    admin = started_admin(config)
    (parent,) = admin.list_shards(stream)
    admin.split_shard(stream, parent.shard_id)
    put(kinesis_endpoint, stream, [(f"k{i % 5}", orjson.dumps({"n": i, "k": f"k{i % 5}"})) for i in range(20, 40)])
    wait_for_arrival_times_to_pass(kinesis_endpoint, stream)  # the read takes what arrived by its planning
    df = load(spark_local, job_file(config, tmp_path), stream)
    assert df.rdd.getNumPartitions() == 3
    rows = df.collect()
    assert sorted(orjson.loads(r.value)["n"] for r in rows) == list(range(40))
    assert [r.partition for r in rows][:20] == [0] * 20, "the parent's rows come first"
    assert {r.partition for r in rows[20:]} == {1, 2}
    for key in {f"k{i}" for i in range(5)}:
        ns = [orjson.loads(r.value)["n"] for r in rows if orjson.loads(r.value)["k"] == key]
        assert ns == sorted(ns), f"key {key} out of order across the split: {ns}"
    assert {bytes(r.headers["kinesis.shard.id"]).decode() for r in rows} == {
        s.shard_id for s in admin.list_shards(stream)
    }


def test_sequence_numbers_and_timestamps_bound_a_shard_s_read(
    spark_local, kinesis_endpoint, stream_name, tmp_path: Path
):
    stream = stream_name("clicks")
    create_stream(kinesis_endpoint, stream, 1)
    config = kinesis_config(kinesis_endpoint, tmp_path, systems__kinesis__samza__msg__serde="json", **KEYS)
    config_file = job_file(config, tmp_path)
    put(kinesis_endpoint, stream, [("k", orjson.dumps(i)) for i in range(6)])
    rows = load(spark_local, config_file, stream).collect()
    sequences = [r.offset for r in rows]
    assert [orjson.loads(r.value) for r in rows] == list(range(6))
    bounded = load(
        spark_local,
        config_file,
        stream,
        startingOffsets=f'{{"0": "{sequences[1]}"}}',
        endingOffsets=f'{{"0": "{sequences[4]}"}}',
    )
    assert values(bounded) == [1, 2, 3]
    assert values(load(spark_local, config_file, stream, **{"from": f"offset:0={sequences[5]}"})) == [5]
    arrival = round(rows[0].timestamp.timestamp() * 1000)
    assert values(load(spark_local, config_file, stream, startingTimestamp=str(arrival))) == list(range(6))
    assert values(load(spark_local, config_file, stream, endingTimestamp=str(arrival))) == []
    assert values(load(spark_local, config_file, stream, startingTimestamp=str(arrival + 3_600_000))) == []
    assert load(spark_local, config_file, stream, startingOffsets="latest").count() == 0


def test_an_offset_of_another_shard_is_refused_naming_stream_shard_and_offset(
    spark_local, kinesis_endpoint, stream_name, tmp_path: Path
):
    stream = stream_name("orders")
    create_stream(kinesis_endpoint, stream, 2)
    config_file = job_file(kinesis_config(kinesis_endpoint, tmp_path, **KEYS), tmp_path)
    with pytest.raises(
        PySparkException, match=rf"kinesis, {stream}, 1.*shardId-000000000001.*'shardId-000000000000:12'"
    ):
        load(spark_local, config_file, stream, startingOffsets='{"1": "shardId-000000000000:12"}').collect()


def test_parents_come_before_children_whatever_the_shard_ids():
    def shard(shard_id: str, *parents: str) -> Shard:
        return Shard(shard_id, parents[0] if parents else None, parents[1] if len(parents) > 1 else None, 0, 1, "0")

    ordered = parents_first([shard("a-9"), shard("a-1", "a-7", "a-9"), shard("a-7"), shard("a-0", "a-1")])
    assert [s.shard_id for s in ordered] == ["a-7", "a-9", "a-1", "a-0"]


def test_a_sequence_number_kinesis_does_not_hold_is_an_error_naming_shard_and_sequence_number(
    spark_local, kinesis_endpoint, stream_name, tmp_path: Path
):
    stream = stream_name("refused")
    create_stream(kinesis_endpoint, stream, 1)
    put(kinesis_endpoint, stream, [("k", b"1")])
    config_file = job_file(kinesis_config(kinesis_endpoint, tmp_path, **KEYS), tmp_path)
    with pytest.raises(PySparkException, match=r"shard 'shardId-000000000000'.*AT_SEQUENCE_NUMBER 12345"):
        load(spark_local, config_file, stream, raw="true", startingOffsets='{"0": "12345"}').collect()


def test_records_that_arrive_after_planning_are_not_read(kinesis_endpoint, stream_name, tmp_path: Path):
    stream = stream_name("late")
    create_stream(kinesis_endpoint, stream, 1)
    config = kinesis_config(kinesis_endpoint, tmp_path)
    put(kinesis_endpoint, stream, [("k", b"%d" % i) for i in range(3)])
    (planned,) = plan_shard_ranges(config, SystemStream("kinesis", stream), ReadBounds())
    wait_until(lambda: now_ms() > planned.planned_at_ms, 5, "the clock to pass the planning instant")
    put(kinesis_endpoint, stream, [("k", b"late")])
    assert [e.message for batch in read_shard_range(config, planned) for e in batch] == [b"0", b"1", b"2"]
