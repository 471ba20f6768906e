"""Spark Structured Streaming: the Kafka source and sink (``spark-sql-kafka-0-10``, its JARs named by
``MILLSTREAM_PEERS_SPARK_JARS``, see ``spark_connector.py``), one ``availableNow`` trigger
that reads the whole topic and stops, on ``local[2]``. W2 keeps its count per key in Python with
``applyInPandasWithState`` and the default state store, checkpointed to ``--workdir``."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
from common import parse_args
from pyspark.sql import SparkSession
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout


def count(key: tuple[bytes], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    total = state.get[0] if state.exists else 0
    for batch in batches:
        size = len(batch)
        yield pd.DataFrame({"key": [key[0]] * size, "value": [str(c) for c in range(total + 1, total + size + 1)]})
        total += size
    state.update((total,))


def main() -> None:
    args = parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(args.name)
        .config("spark.jars", os.environ["MILLSTREAM_PEERS_SPARK_JARS"])
        .config("spark.sql.shuffle.partitions", str(args.partitions))
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .load()
    )
    if args.workload == "w1":
        out = source.select("key", "value")
    else:
        out = (
            source.select("key")
            .groupBy("key")
            .applyInPandasWithState(
                count, "key binary, value string", "count long", "update", GroupStateTimeout.NoTimeout
            )
        )
    query = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("checkpointLocation", str(Path(args.workdir) / "checkpoint"))
        .outputMode("update" if args.workload == "w2" else "append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
