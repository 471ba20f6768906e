"""Runs of a Structured Streaming query over format ``millstream``, shared by the log and Kafka tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pyspark.sql import DataFrame, SparkSession


def run_available_now(spark: SparkSession, config_file: Path, stream: str, checkpoint: Path, job: str) -> list[Any]:
    """One ``trigger(availableNow=True)`` run of the query with this checkpoint location, to its end; returns
    ``(partition, value)`` of every row it read, in the order read per partition."""
    rows: list[Any] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        rows.extend(batch.collect())

    df = (
        spark.readStream.format("millstream")
        .option("config", str(config_file))
        .option("stream", stream)
        .option("job", job)
        .load()
    )
    query = (
        df.writeStream.trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(collect)
        .start()
    )
    assert query.awaitTermination(180), "the availableNow query did not end within 180 s"
    assert query.exception() is None
    ordered = sorted(rows, key=lambda row: (row.partition, int(row.offset)))
    return [(row.partition, orjson.loads(row.value)) for row in ordered]
