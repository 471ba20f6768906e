"""Bulk builds with Spark: every record lands in the file the task (or container) reading it ingests.

The stream's key serde (``string``) differs from the store's (``json``) on purpose: the partition of a
record must follow the bytes the stream's producer hashes, not the bytes the store keeps.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import rocksdict
from pyspark.sql import SparkSession

from millstream.adjunct.published import (
    PublishedVersion,
    download_version,
    latest_version,
    list_versions,
    store_blob_prefix,
)
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.blobstore import blob_store
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.serde.builtin import JsonSerde
from millstream.spark.builds.adstore_build import DatasetError, DatasetSchemaError, build_version
from millstream.testing import read_stream, write_stream
from tests.helpers import create_stream, job_config

pytestmark = pytest.mark.spark

GEO = SystemStream("log", "geo")
PARTITIONS = 3
ROWS: list[dict[str, Any]] = [
    {"key": f"city-{i:03d}", "country": ["fr", "de", "it"][i % 3], "population": i * 1000} for i in range(120)
]


def adjunct_config(tmp_path: Path, **extra: Any) -> Settings:
    settings = {
        "stores__geo__adstore__input": "log.geo",
        "stores__geo__adstore__versioned": "true",
        "stores__geo__key__serde": "json",
        "stores__geo__msg__serde": "json",
    }
    settings.update(extra)
    settings = {key: value for key, value in settings.items() if value is not None}
    config = job_config(tmp_path / "data", **settings)
    create_stream(config, "geo", PARTITIONS)
    return config


def write_dataset(directory: Path, fmt: str, rows: list[dict[str, Any]], spark: SparkSession) -> str:
    """``rows`` as a dataset of ``fmt``; parquet is written by Spark, json and csv by hand (as users get them)."""
    directory.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        path = directory / "rows.json"
        path.write_bytes(b"\n".join(orjson.dumps(row) for row in rows) + b"\n")
    elif fmt == "csv":
        path = directory / "rows.csv"
        with path.open("w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    else:
        path = directory / "rows.parquet"
        spark.createDataFrame(rows).write.parquet(str(path))
    return str(path)


def producer_partitions(config: Settings, keys: list[str]) -> dict[str, int]:
    """Where the stream's own producer puts each key: written to the stream (a build never reads it) and read back."""
    write_stream(config, GEO, [(key, 0) for key in keys])
    return {key: partition for partition, pairs in read_stream(config, GEO).items() for key, _ in pairs}


def ingested(config: Settings, record: PublishedVersion, partitions: list[int] | None, where: Path) -> dict[Any, Any]:
    """The store a reader of ``partitions`` gets: the version's files ingested into RocksDB, decoded."""
    files = download_version(config, record, partitions, where / "files")
    database = rocksdict.Rdict(str(where / "db"), options=rocksdict.Options(raw_mode=True))
    try:
        if files:
            database.ingest_external_file([str(path) for path in files])
        serde = JsonSerde()
        # a raw-mode Rdict holds bytes only; its stubs type keys and values for every mode
        return {serde.from_bytes(cast(bytes, key)): serde.from_bytes(value) for key, value in database.items()}
    finally:
        database.close()


def sst_keys(path: Path) -> list[bytes]:
    database = rocksdict.Rdict(str(path.parent / f"{path.name}.db"), options=rocksdict.Options(raw_mode=True))
    try:
        database.ingest_external_file([str(path)])
        return cast(list[bytes], list(database.keys()))  # raw mode: bytes, which the stubs cannot say
    finally:
        database.close()


@pytest.mark.parametrize("fmt", ["parquet", "json", "csv"])
def test_each_partitions_file_holds_exactly_the_records_the_producer_sends_to_that_partition(tmp_path, spark, fmt):
    config = adjunct_config(tmp_path)
    source = write_dataset(tmp_path / "dataset", fmt, ROWS, spark)
    record = build_version(spark, config, "geo", source, fmt)
    assert (record.layout, record.records, record.skipped, record.partition_count) == ("partitioned", 120, 0, 3)
    assert sorted(record.files) == ["0", "1", "2"]
    assert record.files["1"] == [f"adstore/test-1/geo/{record.version}/part-00001.sst"]
    where = producer_partitions(config, [row["key"] for row in ROWS])
    assert len(set(where.values())) == PARTITIONS  # the test means something only if keys spread
    for partition in range(PARTITIONS):
        expected = {
            row["key"]: {"country": row["country"], "population": row["population"]}
            for row in ROWS
            if where[row["key"]] == partition
        }
        assert ingested(config, record, [partition], tmp_path / f"p{partition}") == expected
    metadata = metadata_store(config)
    metadata.init()
    try:
        assert latest_version(metadata, "geo") == record
    finally:
        metadata.close()


def test_a_broadcast_build_writes_non_overlapping_files_in_key_order_holding_the_whole_dataset(tmp_path, spark):
    config = adjunct_config(tmp_path, task__broadcast__inputs="log.geo#[0-2]")
    source = write_dataset(tmp_path / "dataset", "json", ROWS, spark)
    record = build_version(spark, config, "geo", source, "json", range_files=4)
    assert (record.layout, record.records, record.partition_count) == ("broadcast", 120, 0)
    files = download_version(config, record, [0], tmp_path / "files")
    assert [path.name for path in files] == [f"range-{i:05d}.sst" for i in range(len(files))]
    assert len(files) > 1
    ranges = [sst_keys(path) for path in files]
    for keys in ranges:
        assert keys and keys == sorted(keys)
    for before, after in itertools.pairwise(ranges):
        assert before[-1] < after[0]
    assert ingested(config, record, None, tmp_path / "all") == {
        row["key"]: {"country": row["country"], "population": row["population"]} for row in ROWS
    }


def test_the_value_is_the_value_column_rows_with_a_null_value_are_skipped_and_empty_partitions_have_no_file(
    tmp_path, spark
):
    config = adjunct_config(tmp_path)
    rows: list[dict[str, Any]] = [
        {"key": "a", "value": {"v": 1}, "other": "x"},
        {"key": "b", "value": None, "other": "y"},
    ]
    source = write_dataset(tmp_path / "dataset", "json", rows, spark)
    record = build_version(spark, config, "geo", source, "json")
    assert (record.records, record.skipped) == (1, 1)
    assert len(record.blobs_for(None)) == 1  # one record: one partition has a file
    assert ingested(config, record, None, tmp_path / "value") == {"a": {"v": 1}}
    chosen = build_version(spark, config, "geo", source, "json", value_column="other")
    assert ingested(config, chosen, None, tmp_path / "other") == {"a": "x", "b": "y"}


def test_a_store_without_serdes_takes_binary_columns_as_they_are(tmp_path, spark):
    config = adjunct_config(tmp_path, stores__geo__key__serde=None, stores__geo__msg__serde=None)
    config = config.without("systems.log.samza.key.serde", "systems.log.samza.msg.serde")
    source = str(tmp_path / "binary.parquet")
    spark.createDataFrame([(b"\x00k", b"\xffv"), (b"\x01k", b"w")], "key binary, value binary").write.parquet(source)
    record = build_version(spark, config, "geo", source, "parquet")
    files = download_version(config, record, None, tmp_path / "files")
    assert sorted(key for path in files for key in sst_keys(path)) == [b"\x00k", b"\x01k"]
    with pytest.raises(
        ConfigError, match=r"no key serde \(stores\.geo\.key\.serde\) and key column 'key' .* is string"
    ):
        build_version(spark, config, "geo", write_dataset(tmp_path / "ds", "json", ROWS[:2], spark), "json")
    text_values = str(tmp_path / "text.parquet")
    spark.createDataFrame([(b"k", "text")], "key binary, value string").write.parquet(text_values)
    with pytest.raises(ConfigError, match=r"no value serde \(stores\.geo\.msg\.serde\) .* is string"):
        build_version(spark, config, "geo", text_values, "parquet")


def assert_nothing_published(config: Settings) -> None:
    metadata = metadata_store(config)
    metadata.init()
    try:
        assert latest_version(metadata, "geo") is None and list_versions(metadata, "geo") == []
    finally:
        metadata.close()
    assert blob_store(config).list(store_blob_prefix(config, "geo")) == []


def test_a_duplicate_key_fails_the_build_naming_the_key_and_the_dataset(tmp_path, spark):
    config = adjunct_config(tmp_path)
    source = write_dataset(tmp_path / "dataset", "json", [*ROWS, {**ROWS[7], "population": 1}], spark)
    with pytest.raises(DatasetError, match=f"key 'city-007' appears more than once in '{source}'"):
        build_version(spark, config, "geo", source, "json")
    assert_nothing_published(config)


def test_a_null_key_fails_the_build_naming_the_row(tmp_path, spark):
    config = adjunct_config(tmp_path)
    source = write_dataset(
        tmp_path / "dataset", "json", [*ROWS, {"key": None, "country": "nl", "population": 5}], spark
    )
    with pytest.raises(DatasetError, match=f"row .*'country': 'nl'.* of '{source}' has a null key"):
        build_version(spark, config, "geo", source, "json")
    assert_nothing_published(config)


def test_a_missing_column_is_an_error_naming_it_the_columns_there_and_the_dataset(tmp_path, spark):
    config = adjunct_config(tmp_path)
    source = write_dataset(tmp_path / "dataset", "csv", ROWS, spark)
    with pytest.raises(DatasetSchemaError) as raised:
        build_version(spark, config, "geo", source, "csv", key_column="city")
    message = str(raised.value)
    assert "no key column 'city'" in message and "key, country, population" in message and source in message
    with pytest.raises(DatasetSchemaError, match="no value column 'pop'"):
        build_version(spark, config, "geo", source, "csv", value_column="pop")
    with pytest.raises(DatasetSchemaError, match=r"cannot read dataset .*nowhere"):
        build_version(spark, config, "geo", str(tmp_path / "nowhere"), "parquet")
    assert_nothing_published(config)


@pytest.mark.parametrize(
    ("extra", "store", "message"),
    [
        ({"stores__geo__adstore__versioned": "false"}, "geo", r"stores\.geo\.adstore\.versioned=true"),
        ({"stores__geo__factory": "inmemory"}, "geo", r"config key 'stores\.geo\.factory' is 'inmemory'"),
        ({}, "nope", r"store 'nope' is not configured.*stores: geo"),
        ({"stores__geo__adstore__input": "log.missing"}, "geo", r"'stores\.geo\.adstore\.input'.*log\.missing"),
        ({"stores__geo__msg__serde": "nosuch"}, "geo", r"unknown serde 'nosuch' \(named by stores\.geo\.msg\.serde\)"),
    ],
    ids=["not-versioned", "in-memory", "unknown-store", "missing-input-stream", "unknown-serde"],
)
def test_a_store_that_cannot_be_bulk_built_is_a_config_error_naming_the_key(tmp_path, spark, extra, store, message):
    config = adjunct_config(tmp_path, **extra)
    with pytest.raises(ConfigError, match=message):
        build_version(spark, config, store, str(tmp_path / "unused"), "json")


def test_a_store_that_is_not_adjunct_is_a_config_error_naming_the_key(tmp_path, spark):
    config = job_config(tmp_path / "data", stores__plain__key__serde="string")
    with pytest.raises(ConfigError, match=r"'stores\.plain\.adstore\.input'"):
        build_version(spark, config, "plain", str(tmp_path / "unused"), "json")


def test_a_build_takes_a_table_of_the_sessions_catalog_or_a_sql_query(tmp_path, spark):
    config = adjunct_config(tmp_path)
    spark.createDataFrame(ROWS).createOrReplaceTempView("geo_rows")
    from_table = build_version(spark, config, "geo", "geo_rows", "table")
    assert (from_table.records, from_table.source) == (120, "table geo_rows")
    query = "SELECT key, population AS value FROM geo_rows\n WHERE country = 'fr'"
    from_query = build_version(spark, config, "geo", query, "sql")
    assert from_query.source == "query SELECT key, population AS value FROM geo_rows WHERE country = 'fr'"
    assert ingested(config, from_query, None, tmp_path / "query") == {
        row["key"]: row["population"] for row in ROWS if row["country"] == "fr"
    }


def test_a_missing_table_or_a_bad_query_is_an_error_naming_it(tmp_path, spark):
    config = adjunct_config(tmp_path)
    with pytest.raises(DatasetSchemaError, match=r"cannot read table no_such_table: .*no_such_table"):
        build_version(spark, config, "geo", "no_such_table", "table")
    with pytest.raises(DatasetSchemaError, match=r"cannot read query SELECT nope FROM nowhere: "):
        build_version(spark, config, "geo", "SELECT nope FROM nowhere", "sql")
    assert_nothing_published(config)
