"""Writing a DataFrame to a stream with format ``millstream`` on Spark local mode over the embedded log:
every row lands once, where the stream's own producer puts its key, encoded by the stream's serdes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from millstream.config import Config
from millstream.model import SystemStream
from millstream.testing import read_stream, write_stream
from tests.helpers import create_stream, job_config

pytestmark = pytest.mark.spark

KEYED = StructType([StructField("key", StringType()), StructField("value", StringType())])


def job_file(config: Config, tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    return str(path)


def save(df: DataFrame, config_file: str, stream: str, mode: str = "append", **options: str) -> None:
    writer = df.write.format("millstream").mode(mode).option("config", config_file).option("stream", stream)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def json_rows(spark: SparkSession, pairs: Sequence[tuple[object, object]], partitions: int = 3) -> DataFrame:
    rows = [(orjson.dumps(k).decode(), orjson.dumps(v).decode()) for k, v in pairs]
    return spark.createDataFrame(rows, KEYED).repartition(partitions)


def test_every_row_lands_once_in_the_partition_the_stream_s_producer_gives_its_key(spark_local, tmp_path: Path):
    config = job_config(tmp_path)
    for stream in ("by-spark", "by-producer"):
        create_stream(config, stream, 4)
    pairs = [(f"user-{i % 13}", {"n": i}) for i in range(200)]
    save(json_rows(spark_local, pairs), job_file(config, tmp_path), "log.by-spark")
    write_stream(config, SystemStream("log", "by-producer"), pairs)
    by_spark, by_producer = (read_stream(config, SystemStream("log", s)) for s in ("by-spark", "by-producer"))
    assert sum(len(records) for records in by_spark.values()) == 200
    assert sorted(v["n"] for records in by_spark.values() for _, v in records) == list(range(200))
    keys = {p: {k for k, _ in records} for p, records in by_producer.items() if records}
    assert {p: {k for k, _ in records} for p, records in by_spark.items() if records} == keys


def test_a_partition_column_pins_each_row_to_its_partition(spark_local, tmp_path: Path):
    config = job_config(tmp_path)
    create_stream(config, "pinned", 3)
    schema = StructType([*KEYED.fields, StructField("partition", IntegerType())])
    rows = [('"a"', '{"n": 0}', 2), ('"b"', '{"n": 1}', 2), ('"c"', '{"n": 2}', 0)]
    save(spark_local.createDataFrame(rows, schema), job_file(config, tmp_path), "log.pinned")
    landed = read_stream(config, SystemStream("log", "pinned"))
    assert {p: sorted(records) for p, records in landed.items()} == {
        0: [("c", {"n": 2})],
        1: [],
        2: [("a", {"n": 0}), ("b", {"n": 1})],
    }


def test_raw_writes_the_bytes_as_given_and_the_read_gives_them_back(spark_local, tmp_path: Path):
    config = job_config(tmp_path, systems__log__samza__msg__serde="bytes")
    create_stream(config, "blobs", 1)
    schema = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
    config_file = job_file(config, tmp_path)
    save(
        spark_local.createDataFrame([(b"k", b"\x00\x01"), (None, b"\xff")], schema).coalesce(1),  # one writer: in order
        config_file,
        "log.blobs",
        raw="true",
    )
    back = spark_local.read.format("millstream").option("config", config_file).option("stream", "log.blobs")
    rows = back.option("raw", "true").load().orderBy("offset").collect()
    assert [(r.key and bytes(r.key), bytes(r.value)) for r in rows] == [(b"k", b"\x00\x01"), (None, b"\xff")]


def test_only_append_writes_overwrite_is_refused_naming_the_stream_and_the_mode(spark_local, tmp_path: Path):
    config = job_config(tmp_path)
    create_stream(config, "kept", 1)
    with pytest.raises(PySparkException, match=r"log\.kept.*'overwrite'.*'append'"):
        save(json_rows(spark_local, [("k", 1)]), job_file(config, tmp_path), "log.kept", mode="overwrite")
    with pytest.raises(PySparkException, match=r"ErrorIfExists"):
        save(json_rows(spark_local, [("k", 1)]), job_file(config, tmp_path), "log.kept", mode="errorifexists")
    assert read_stream(config, SystemStream("log", "kept")) == {0: []}


def test_a_value_that_is_not_json_fails_the_write_naming_stream_and_value(spark_local, tmp_path: Path):
    config = job_config(tmp_path)
    create_stream(config, "strict", 1)
    df = spark_local.createDataFrame([('"k"', "not json")], KEYED)
    with pytest.raises(PySparkException, match=r"log\.strict.*'not json'.*raw"):
        save(df, job_file(config, tmp_path), "log.strict")


def test_a_column_with_no_place_in_a_record_is_refused_naming_it(spark_local, tmp_path: Path):
    config = job_config(tmp_path)
    create_stream(config, "strict", 1)
    df = spark_local.createDataFrame([('"k"', "1", "x")], "key string, value string, colour string")
    with pytest.raises(PySparkException, match=r"\['colour'\]"):
        save(df, job_file(config, tmp_path), "log.strict")


def test_a_headers_column_gives_each_record_its_headers(spark_local, tmp_path: Path):
    config = job_config(tmp_path)
    create_stream(config, "traced", 1)
    config_file = job_file(config, tmp_path)
    df = spark_local.createDataFrame(
        [("1", {"trace": b"t-1"}), ("2", None)], "value string, headers map<string, binary>"
    ).coalesce(1)
    save(df, config_file, "log.traced")
    back = spark_local.read.format("millstream").option("config", config_file).option("stream", "log.traced").load()
    rows = back.orderBy("offset").collect()
    assert [(r.value, r.headers and {k: bytes(v) for k, v in r.headers.items()}) for r in rows] == [
        ("1", {"trace": b"t-1"}),
        ("2", None),
    ]
