"""``millstream adstore``: build a version with Spark, list versions, mark the end of a version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from millstream.adjunct.markers import end_of_version_label
from millstream.cli.common import exit_code_of
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.coordinator.prepare import load_job_config
from millstream.model import SystemStream
from millstream.spark.builds.adstore_build import BulkBuildError, DatasetError, DatasetSchemaError
from tests.cli.test_main import SPARK, millstream, table_rows, write_config
from tests.helpers import create_stream

STORE = {
    "stores.geo.adstore.input": "log.geo",
    "stores.geo.adstore.versioned": "true",
    "stores.geo.key.serde": "string",
    "stores.geo.msg.serde": "json",
    "stores.plain.adstore.input": "log.geo",
    "stores.plain.key.serde": "string",
    **SPARK,
}


def setup(tmp_path: Path, rows: list[dict[str, Any]] | None = None) -> tuple[Path, Path]:
    """A job config with the versioned adjunct store ``geo`` on ``log.geo`` (3 partitions), and a JSON dataset."""
    path = write_config(tmp_path, STORE)
    create_stream(load_job_config(path), "geo", 3)
    dataset = tmp_path / "geo.json"
    rows = rows if rows is not None else [{"key": f"c{i:02d}", "name": f"city {i}"} for i in range(20)]
    dataset.write_bytes(b"\n".join(orjson.dumps(row) for row in rows) + b"\n")
    return path, dataset


@pytest.mark.spark
def test_build_publishes_a_version_that_versions_then_lists_as_latest(tmp_path):
    path, dataset = setup(tmp_path)
    assert millstream("adstore", "versions", path, "--store", "geo").stdout.strip() == (
        "no published versions of store 'geo'"
    )
    build = millstream("adstore", "build", path, "--store", "geo", "--from", dataset, "--format", "json",
                       "--master", "local[2]")  # fmt: skip
    assert build.returncode == 0, build.stderr
    lines = build.stdout.splitlines()
    version = lines[0].removeprefix("published version ").removesuffix(" of store 'geo'")
    assert lines[1:4] == ["layout: partitioned", "records: 20 (skipped 0 with a null value)", "files: 3"]
    assert sorted(line.split(":")[0].strip() for line in lines[4:]) == ["partition 0", "partition 1", "partition 2"]
    assert all(f"adstore/cli-test-1/geo/{version}/part-0000" in line for line in lines[4:])
    rows = table_rows(millstream("adstore", "versions", path, "--store", "geo").stdout)
    assert [(row[0], row[1], row[2], row[3], row[4], row[6]) for row in rows] == [
        (version, "yes", "partitioned", "3", "20", str(dataset))
    ]


@pytest.mark.spark
def test_a_build_from_a_dataset_without_the_key_column_exits_2_naming_it_and_publishes_nothing(tmp_path):
    path, dataset = setup(tmp_path, [{"key": "a", "name": "x"}])
    missing = millstream("adstore", "build", path, "--store", "geo", "--from", dataset, "--format", "json",
                         "--key", "city", "--master", "local[2]")  # fmt: skip
    assert missing.returncode == 2, missing.stderr
    assert f"dataset '{dataset}' has no key column 'city' (columns: key, name)" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert "no published versions" in millstream("adstore", "versions", path, "--store", "geo").stdout


def test_a_dataset_whose_records_cannot_be_built_fails_a_build_with_exit_1_and_a_missing_column_with_exit_2():
    """The two ways a build's dataset is refused, as the CLI exits for them (``guarded``, and ``build``'s own
    mapping of ``DatasetSchemaError``, which the Spark test above runs end to end); what each names, on a real
    session, is in ``tests/spark/builds/test_adstore_build.py``, duplicate and null keys included."""
    assert exit_code_of(DatasetError("key 'a' appears more than once in 'geo.json'")) == 1
    assert issubclass(DatasetSchemaError, BulkBuildError) and not issubclass(DatasetError, DatasetSchemaError)


def test_a_build_for_a_store_that_cannot_be_bulk_built_exits_2_before_starting_spark(tmp_path):
    path, dataset = setup(tmp_path)
    cases = [
        (["--store", "nope", "--format", "json"], "store 'nope' is not configured"),
        (["--store", "plain", "--format", "json"], "stores.plain.adstore.versioned=true"),
        (["--store", "geo", "--format", "orc"], "--format must be one of csv, json, parquet, not 'orc'"),
    ]
    for args, message in cases:
        result = millstream("adstore", "build", path, "--from", dataset, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Spark" not in result.stderr  # refused before a JVM started


def test_a_build_takes_exactly_one_input_and_exits_2_for_any_other_combination_before_starting_spark(tmp_path):
    path, dataset = setup(tmp_path)
    cases: list[tuple[list[Any], str]] = [
        ([], "give exactly one input: --from PATH --format FMT, --table NAME or --sql QUERY (given: none)"),
        (["--from", dataset, "--format", "json", "--table", "t"], "(given: --from, --table)"),
        (["--table", "t", "--sql", "SELECT 1"], "(given: --table, --sql)"),
        (["--table", "t", "--format", "json"], "--format applies to --from only, not to --table"),
        (["--sql", "SELECT 1", "--master", "local[2]", "--remote", "sc://localhost:1"], "exclude each other"),
    ]
    for args, message in cases:
        result = millstream("adstore", "build", path, "--store", "geo", *args)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "Spark" not in result.stderr.replace("Spark Connect", "")  # refused before a JVM started


@pytest.mark.spark
def test_a_build_takes_a_sql_query_over_files_in_a_local_session(tmp_path):
    path, dataset = setup(tmp_path)
    query = f"SELECT key, name AS value FROM json.`{dataset}` WHERE key < 'c05'"
    build = millstream("adstore", "build", path, "--store", "geo", "--sql", query, "--master", "local[2]")
    assert build.returncode == 0, build.stderr
    assert build.stdout.splitlines()[2] == "records: 5 (skipped 0 with a null value)"
    assert "query SELECT" in millstream("adstore", "versions", path, "--store", "geo").stdout  # the record's source


def test_end_version_marks_every_partition_of_the_input_stream(tmp_path):
    path, _ = setup(tmp_path)
    result = millstream("adstore", "end-version", path, "--store", "geo", "--label", "v7")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "end of version 'v7' marked on 3 partition(s) of log.geo"
    assert markers(load_job_config(path), SystemStream("log", "geo")) == {0: ["v7"], 1: ["v7"], 2: ["v7"]}
    refused = millstream("adstore", "end-version", path, "--store", "plain", "--label", "v8")
    assert refused.returncode == 2 and "store 'plain' is not versioned" in refused.stderr
    unknown = millstream("adstore", "versions", path, "--store", "nope")
    assert unknown.returncode == 2 and "store 'nope' is not configured" in unknown.stderr


def markers(config: Settings, stream: SystemStream) -> dict[int, list[str | None]]:
    """The end-of-version label of every message of every partition (None: a data message)."""
    factory = system_factory(config, stream.system)
    admin = factory.get_admin(stream.system, config)
    admin.start()
    try:
        metadata = admin.get_system_stream_metadata([stream.stream])[stream.stream]
    finally:
        admin.stop()
    consumer = factory.get_consumer(stream.system, config)
    found: dict[int, list[str | None]] = {}
    for partition, info in metadata.partitions.items():
        found[partition] = []
        if info.oldest_offset is not None:
            consumer.register(stream.partition(partition), info.oldest_offset)
    consumer.start()
    try:
        for _ in range(10):
            batches = consumer.poll({stream.partition(p) for p in metadata.partitions}, 0.2)
            for ssp, batch in batches.items():
                found[ssp.partition].extend(end_of_version_label(envelope) for envelope in batch)
            if all(found.values()):
                break
    finally:
        consumer.stop()
    return found
