"""A store's info-log bound reaches RocksDB through the Spark runner (local mode), from the store's config keys."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from millstream.spark.run.runner import SparkJobRunner
from millstream.storage.layout import StoreLayout
from tests.helpers import seal
from tests.storage.test_stateful_jobs import config_for, final_stores, prepare, reference

pytestmark = pytest.mark.spark


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
    written = prepare(config)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert final_stores(config) == reference(written)
    logs = sorted((StoreLayout.of(config).logged_base / "counts").rglob("LOG*"))
    by_store: dict[Path, list[Path]] = {}
    for log in logs:
        by_store.setdefault(log.parent, []).append(log)
    assert by_store and all(len(files) <= 2 for files in by_store.values()), by_store
    assert any(log.name.startswith("LOG.old") for log in logs), "rolled at 8 KB, not at RocksDB's default (never)"
