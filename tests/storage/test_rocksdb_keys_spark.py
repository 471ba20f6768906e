"""A store's ``stores.<s>.rocksdb.*`` keys (Samza's) reach RocksDB through the Spark runner (local mode), in every
task's store: the info log's bound, the bound on its open files, the compression and block size of its table files, its
compaction style."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millstream.config.settings import Settings
from millstream.spark.run.runner import SparkJobRunner
from millstream.storage.layout import StoreLayout
from tests.helpers import seal
from tests.storage.test_stateful_jobs import config_for, final_stores, prepare, reference

pytestmark = pytest.mark.spark


def run_exactly(spark: SparkSession, config: Settings) -> Path:
    """Run the stateful job of ``config`` to its end on Spark, check its stores are exact, and return where the
    tasks' copies of the store ``counts`` are."""
    written = prepare(config)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark).run()
    assert result.outcome == "finished", result.error
    assert final_stores(config) == reference(written)
    return StoreLayout.of(config).logged_base / "counts"


def test_on_spark_a_stores_info_log_is_rolled_at_its_configured_size_and_keeps_its_configured_files(
    spark_local: SparkSession, tmp_path: Path
) -> None:
    """The log a store writes at open alone (its options, about 20 KB) is past 8 KB: rolled over at least once."""
    config = config_for(
        tmp_path,
        "changelog",
        stores__counts__rocksdb__max__log__file__size__bytes=8 * 1024,
        stores__counts__rocksdb__keep__log__file__num=2,
    )
    logs = sorted(run_exactly(spark_local, config).rglob("LOG*"))
    by_store: dict[Path, list[Path]] = {}
    for log in logs:
        by_store.setdefault(log.parent, []).append(log)
    assert by_store and all(len(files) <= 2 for files in by_store.values()), by_store
    assert any(log.name.startswith("LOG.old") for log in logs), "rolled at 8 KB, not at RocksDB's default (never)"


def test_on_spark_a_stores_open_files_compression_block_size_and_compaction_style_reach_rocksdb_and_the_job_is_exact(
    spark_local: SparkSession, tmp_path: Path
) -> None:
    config = config_for(
        tmp_path,
        "changelog",
        stores__counts__rocksdb__max__open__files=30,
        stores__counts__rocksdb__compression="zstd",
        stores__counts__rocksdb__block__size__bytes=16384,
        stores__counts__rocksdb__compaction__style="universal",
    )
    options = [path.read_text() for path in run_exactly(spark_local, config).rglob("OPTIONS-*")]
    assert options, "every task's store wrote its options"
    for text in options:
        assert "max_open_files=30\n" in text and "  compression=kZSTD\n" in text and "  block_size=16384\n" in text
        assert "  compaction_style=kCompactionStyleUniversal\n" in text
