"""Spark Structured Streaming: the Kafka source and sink (``spark-sql-kafka-0-10``, its JARs named by
``MILLSTREAM_PEERS_SPARK_JARS``, see ``spark_connector.py``), one ``availableNow`` trigger
that reads the whole topic and stops, on ``local[2]``. W2 keeps its count per key in Python with
``applyInPandasWithState`` and the default state store, checkpointed to ``--workdir``.

``--follow`` (the latency benchmark): no trigger set, Spark's default (a micro-batch as soon as the previous one
ends, ``processingTime="0 seconds"``), the source's and sink's defaults otherwise, until the process is killed.
``--trigger realtime`` instead: real-time mode (``trigger(realTime=...)``, Spark 4.1+), Spark's lowest-latency
trigger, with long-running batches of ``REAL_TIME_BATCH`` (checkpoints between them), on ``local[N]`` with N the
input's partitions (it runs a task per partition for the whole batch: with fewer slots, partitions wait), W1 only
(its allowlist of operators has no ``applyInPandasWithState``);
``--trigger continuous``: continuous processing (map-like queries only, so W1 only)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
from common import parse_args
from pyspark.sql import SparkSession
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

REAL_TIME_BATCH = "5 seconds"
TRIGGERS = ("default", "realtime", "continuous")


def count(key: tuple[bytes], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    total = state.get[0] if state.exists else 0
    for batch in batches:
        size = len(batch)
        yield pd.DataFrame({"key": [key[0]] * size, "value": [str(c) for c in range(total + 1, total + size + 1)]})
        total += size
    state.update((total,))


def count_follow(key: tuple[bytes], batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """``count`` under ``--follow``: the input value after the count, in offset order within the key."""
    total = state.get[0] if state.exists else 0
    for batch in batches:
        values = batch.sort_values(["partition", "offset"])["value"]
        counts = range(total + 1, total + len(values) + 1)
        out = [b"%d,%s" % (c, bytes(v)) for c, v in zip(counts, values, strict=True)]  # Python workers: no common
        yield pd.DataFrame({"key": [key[0]] * len(values), "value": out})
        total += len(values)
    state.update((total,))


def trigger_option() -> str:
    """``--trigger`` (taken off ``sys.argv`` before the common arguments are parsed)."""
    if "--trigger" not in sys.argv:
        return "default"
    index = sys.argv.index("--trigger")
    value = sys.argv[index + 1]
    del sys.argv[index : index + 2]
    if value not in TRIGGERS:
        raise SystemExit(f"--trigger {value}: one of {', '.join(TRIGGERS)}")
    return value


def main() -> None:
    trigger = trigger_option()
    args = parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # real-time mode and continuous processing hold a task per input partition for the whole batch: one slot each
    cores = 2 if trigger == "default" else max(2, args.partitions)
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
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
    elif args.follow:
        out = (
            source.select("key", "value", "partition", "offset")
            .groupBy("key")
            .applyInPandasWithState(
                count_follow, "key binary, value binary", "count long", "update", GroupStateTimeout.NoTimeout
            )
        )
    else:
        out = (
            source.select("key")
            .groupBy("key")
            .applyInPandasWithState(
                count, "key binary, value string", "count long", "update", GroupStateTimeout.NoTimeout
            )
        )
    writer = (
        out.writeStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("checkpointLocation", str(Path(args.workdir) / "checkpoint"))
        .outputMode("update" if args.workload == "w2" or trigger == "realtime" else "append")  # real-time: update only
    )
    if not args.follow:
        writer = writer.trigger(availableNow=True)
    elif trigger == "realtime":
        writer = writer.trigger(realTime=REAL_TIME_BATCH)
    elif trigger == "continuous":
        writer = writer.trigger(continuous="1 second")
    query = writer.start()
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
