"""Through Spark Connect (``sc://``), as Databricks serverless and shared clusters require: formats
``millstream`` (reads and writes), ``millstream-checkpoints`` and ``millstream-store`` and ``millstream adstore
build`` on a session with no ``sparkContext``, their Python code running in the server's Python workers.

One server for the module (``connect_server``, started once per run): each test costs a few seconds.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import yaml
from pyspark.sql import SparkSession

from millstream.config import Config
from millstream.model import SystemStream
from millstream.spark.builds.adstore_build import build_version, default_range_files
from millstream.spark.run.connect import is_connect
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.cli.test_adstore import setup as cli_setup
from tests.cli.test_main import millstream
from tests.helpers import create_stream, fill, job_config, seal
from tests.spark.builds.test_adstore_build import ROWS, adjunct_config, ingested, producer_partitions
from tests.spark.connect_server import ConnectServer
from tests.spark.sources.test_store_datasource import EXPECTED as STORE_ROWS
from tests.spark.sources.test_store_datasource import run_counting_job, store_rows
from tests.spark.sources.test_stream_write import json_rows, save

pytestmark = pytest.mark.spark

VIEWS = SystemStream("log", "page-views")


def job_file(config: Config, tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    return str(path)


def test_the_session_is_a_connect_client_without_a_spark_context(spark_connect: SparkSession):
    assert is_connect(spark_connect)
    with pytest.raises(Exception, match="JVM_ATTRIBUTE_NOT_SUPPORTED"):
        spark_connect.sparkContext  # noqa: B018  # what failed the formats and the bulk build before
    assert default_range_files(spark_connect) == 4  # a broadcast build's files: the server's shuffle partitions


def test_format_millstream_reads_a_stream_through_connect(spark_connect, tmp_path):
    config = job_config(tmp_path)
    create_stream(config, VIEWS.stream, 2)
    write_stream(config, VIEWS, [("u0", {"n": i}) for i in range(3)], partition=0)
    write_stream(config, VIEWS, [("u1", {"n": 9})], partition=1)
    frame = spark_connect.read.format("millstream").option("config", job_file(config, tmp_path))
    rows = frame.option("stream", str(VIEWS)).load().collect()
    assert sorted((r.partition, r.offset, orjson.loads(r.key), orjson.loads(r.value)) for r in rows) == [
        (0, "0", "u0", {"n": 0}),
        (0, "1", "u0", {"n": 1}),
        (0, "2", "u0", {"n": 2}),
        (1, "0", "u1", {"n": 9}),
    ]


def test_format_millstream_checkpoints_reads_a_jobs_checkpoints_through_connect(spark_connect, tmp_path):
    config = job_config(tmp_path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 3)
    seal(config, "in")
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    frame = spark_connect.read.format("millstream-checkpoints").option("config", job_file(config, tmp_path)).load()
    assert sorted((r.task, r.stream, r.partition, r.offset) for r in frame.collect()) == [
        ("Partition 0", "in", 0, "2"),
        ("Partition 1", "in", 1, "2"),
    ]


def test_format_millstream_store_reads_a_store_from_its_changelog_through_connect(spark_connect, tmp_path):
    assert store_rows(spark_connect, run_counting_job(tmp_path, "changelog")) == STORE_ROWS


def test_format_millstream_writes_a_dataframe_to_a_stream_through_connect(spark_connect, tmp_path):
    config = job_config(tmp_path)
    create_stream(config, "seeded", 2)
    pairs = [(f"u{i}", {"n": i}) for i in range(20)]
    save(json_rows(spark_connect, pairs), job_file(config, tmp_path), "log.seeded")
    written = read_stream(config, SystemStream("log", "seeded"))
    assert sorted(value["n"] for records in written.values() for _, value in records) == list(range(20))


def test_a_bulk_build_through_connect_puts_each_record_in_its_partitions_file(spark_connect, tmp_path):
    """The dataset is a DataFrame of the Connect session written as parquet where the server reads it."""
    config = adjunct_config(tmp_path)
    source = str(tmp_path / "rows.parquet")
    spark_connect.createDataFrame(ROWS).write.parquet(source)
    record = build_version(spark_connect, config, "geo", source, "parquet")
    assert (record.layout, record.records, sorted(record.files)) == ("partitioned", 120, ["0", "1", "2"])
    where = producer_partitions(config, [row["key"] for row in ROWS])
    for partition in range(3):
        assert ingested(config, record, [partition], tmp_path / f"p{partition}") == {
            row["key"]: {"country": row["country"], "population": row["population"]}
            for row in ROWS
            if where[row["key"]] == partition
        }


def test_adstore_build_remote_takes_a_table_of_the_connect_servers_catalog(
    spark_connect: SparkSession, connect_server: ConnectServer, tmp_path: Path
):
    path, _ = cli_setup(tmp_path)
    rows = [(f"c{i:02d}", f"city {i}") for i in range(10)]
    spark_connect.createDataFrame(rows, "key string, name string").write.mode("overwrite").saveAsTable("geo_cities")
    build = millstream("adstore", "build", path, "--store", "geo", "--table", "geo_cities",
                       "--remote", connect_server.url, timeout=300)  # fmt: skip
    assert build.returncode == 0, build.stderr
    assert build.stdout.splitlines()[1:4] == [
        "layout: partitioned",
        "records: 10 (skipped 0 with a null value)",
        "files: 3",
    ]
