"""Format ``millstream-store`` on Spark local mode: a store's rows equal what the job left in it, read from its
blob-store snapshot (local and S3) or from its changelog."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from pyspark.errors import PySparkException

from millstream.contracts.blobstore import blob_store
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, write_stream
from tests.helpers import create_stream, seal
from tests.integration.blob_emulators import MotoS3Server
from tests.storage.harness import state_config

pytestmark = pytest.mark.spark

MESSAGES: dict[int, list[tuple[str, Any]]] = {
    0: [("a", 1), ("b", 2), ("a", 3), ("gone", 4), ("gone", "forget"), ("a", 5)],
    1: [("c", 1), ("d", 2), ("d", 3), ("d", 4)],
}
EXPECTED = {("Partition 0", "a", 3), ("Partition 0", "b", 1), ("Partition 1", "c", 1), ("Partition 1", "d", 3)}
"""Per task, each key's count; ``gone`` was counted, then deleted (a tombstone in the changelog)."""


def run_counting_job(tmp_path: Path, backend: str, **extra: Any) -> Path:
    """Run the counting job on ``MESSAGES`` to its end; returns its config file."""
    config = state_config(tmp_path, backend, task="tests.storage.jobs:CountPerKeyDeletingOnForget", **extra)
    if backend != "changelog":
        blob_store(prepare(config)).create()
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    for partition, messages in MESSAGES.items():
        write_stream(config, SystemStream("log", "in"), messages, partition=partition)
    seal(config, "in")
    assert InProcessRunner(config).run(timeout=60).outcome == "finished"
    config_file = tmp_path / "job.yaml"
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    return config_file


def store_rows(spark: Any, config_file: Path, **options: str) -> set[tuple[str, Any, Any]]:
    reader = spark.read.format("millstream-store").option("config", str(config_file)).option("store", "counts")
    for name, value in options.items():
        reader = reader.option(name, value)
    return {(row.task, orjson.loads(row.key), orjson.loads(row.value)) for row in reader.load().collect()}


@pytest.fixture(scope="module")
def both_backends(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A job whose store backs up to its changelog and to the local blob store."""
    return run_counting_job(tmp_path_factory.mktemp("both"), "both")


@pytest.mark.parametrize("source", ["blob", "changelog", None])
def test_the_rows_are_the_store_each_task_left_from_either_backup(spark_local, both_backends: Path, source: str | None):
    """The blob snapshot and the changelog (last write wins, the tombstone deletes) give the same store; the
    default source is the blob store."""
    options = {"source": source} if source else {}
    assert store_rows(spark_local, both_backends, **options) == EXPECTED


def test_one_spark_partition_per_task(spark_local, both_backends: Path):
    df = spark_local.read.format("millstream-store").option("config", str(both_backends)).option("store", "counts")
    assert df.load().rdd.getNumPartitions() == 2


def test_raw_rows_are_the_bytes_the_store_holds(spark_local, both_backends: Path):
    rows = (
        spark_local.read.format("millstream-store")
        .option("config", str(both_backends))
        .option("store", "counts")
        .option("raw", "true")
        .load()
        .collect()
    )
    assert {(row.task, bytes(row.key), bytes(row.value)) for row in rows} == {
        (task, key.encode(), orjson.dumps(count)) for task, key, count in EXPECTED
    }


def test_a_store_with_only_a_changelog_is_read_from_it_by_default(spark_local, tmp_path: Path):
    assert store_rows(spark_local, run_counting_job(tmp_path, "changelog")) == EXPECTED


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[MotoS3Server]:
    server = MotoS3Server(tmp_path / "moto").start()
    try:
        yield server
    finally:
        server.stop()


def test_a_snapshot_in_s3_is_read_from_s3(spark_local, tmp_path: Path, s3: MotoS3Server):
    config_file = run_counting_job(
        tmp_path,
        "blobstore",
        blob__store__manager__factory="s3",
        blob__store__s3__bucket="snapshots",
        blob__store__s3__endpoint__url=s3.endpoint_url,
        sensitive__blob__store__s3__access__key__id="testing",
        sensitive__blob__store__s3__secret__access__key="testing",
    )
    assert store_rows(spark_local, config_file) == EXPECTED


def test_a_source_the_store_is_not_backed_up_to_is_refused_naming_the_store(spark_local, tmp_path: Path):
    config_file = tmp_path / "job.yaml"
    config = state_config(tmp_path, "blobstore")
    config_file.write_text(yaml.safe_dump(dict(config.items())), encoding="utf-8")
    with pytest.raises(PySparkException, match="store 'counts' has no changelog"):
        store_rows(spark_local, config_file, source="changelog")
    with pytest.raises(PySparkException, match="no store 'missing'"):
        spark_local.read.format("millstream-store").option("config", str(config_file)).option(
            "store", "missing"
        ).load().collect()


def test_the_config_and_store_options_are_required(spark_local):
    with pytest.raises(PySparkException, match=r"options 'config' .* and 'store'"):
        spark_local.read.format("millstream-store").load().collect()
