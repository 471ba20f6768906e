"""Kinesis reading: millstream vs. a raw boto3 reader of the same shards, in one run, against kinesalite.

    python -m benchmarks.kinesis_passthrough [--records 50000] [--shards 4] [--size 100] [--limit 1000] [--spark]

Every figure comes from the same stream in the same run, so the ratios hold whatever the machine:
  raw boto3       one thread per shard: GetShardIterator(TRIM_HORIZON), GetRecords(--limit) to the end
  consumer        millstream's KinesisSystemConsumer alone (leases, readers, slots), polled in a loop
  no-op job       millstream reading every record into a task that does nothing (1 container, in-process)
  pass-through    millstream copying every record to a log stream (1 container, in-process)
  spark           the pass-through through the Spark runner with 2 containers (with --spark)
Rates are records / (first to last record received) of each reader, both asking for --limit records
per GetRecords; job rates are per container (first to last message processed), summed.

The emulator has no read limits, so the consumer's limiter is opened up here to compare code, not
quotas. A real deployment is bounded per shard by Kinesis: 5 GetRecords calls/s and 2 MiB/s
(shared by every application reading the shard), at most 10,000 records per call; the bound this
run's record size implies is printed at the end.
"""

from __future__ import annotations

import argparse
import importlib
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from millstream import StreamTask
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.connectors.kinesis.factory import KinesisSystemFactory
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.prepare import prepare
from millstream.embedded.log.factory import LogSystemFactory
from millstream.model import SystemStreamPartition
from millstream.testing import InProcessRunner
from tests.integration.kinesis.emulator import ACCESS_KEY, REGION, SECRET_KEY, Kinesalite

STREAM = "bench"
OPEN_LIMITS = {
    "consumer.shard.getrecords.per.second": "1000",
    "consumer.shard.bytes.per.second": str(1 << 30),
    "consumer.idle.ms": "20",
    "consumer.lease.duration.ms": "3000",
    "consumer.checkpoint.sync.ms": "200",
}
COUNTED = {"n": 0}
_COUNTED_LOCK = threading.Lock()


class CountingNoOp(StreamTask):
    """Does nothing but count, so the benchmark knows when every record went through (in-process)."""

    def process(self, envelope, collector, coordinator):
        with _COUNTED_LOCK:
            COUNTED["n"] += 1


def config_for(endpoint: str, root: Path, run: str, task: str, limit: int, containers: int = 1) -> Config:
    values: dict[str, Any] = {
        "job.name": f"bench-{run}",
        "job.data.dir": str(root / "data"),
        "job.container.count": containers,
        "task.class": task,
        "task.inputs": f"kinesis.{STREAM}",
        "task.commit.ms": 5_000,
        "systems.kinesis.samza.factory": "kinesis",
        "systems.kinesis.aws.endpoint": endpoint,
        "systems.kinesis.aws.region": REGION,
        "systems.kinesis.aws.accessKey": ACCESS_KEY,
        "sensitive.systems.kinesis.aws.secretKey": SECRET_KEY,
        "systems.kinesis.consumer.initial.position": "TRIM_HORIZON",
        "systems.kinesis.consumer.getrecords.max.records": limit,
        "systems.log.path": str(root / "log"),
    }
    values.update({f"systems.kinesis.{key}": value for key, value in OPEN_LIMITS.items()})
    return prepare(Settings(values))


def write_records(client: Any, records: int, size: int) -> float:
    payload = b"x" * size
    started = time.monotonic()

    def put(start: int) -> None:
        entries = [{"Data": payload, "PartitionKey": f"key-{i}"} for i in range(start, min(start + 500, records))]
        response = client.put_records(StreamName=STREAM, Records=entries)
        assert response["FailedRecordCount"] == 0

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(put, range(0, records, 500)))
    return records / (time.monotonic() - started)


def raw_read(client: Any, shards: list[str], limit: int) -> float:
    """One thread per shard reading to the end with plain boto3: the reference rate."""
    spans: list[tuple[float, float, int]] = []

    def read(shard: str) -> None:
        iterator = client.get_shard_iterator(StreamName=STREAM, ShardId=shard, ShardIteratorType="TRIM_HORIZON")[
            "ShardIterator"
        ]
        first = last = 0.0
        count = 0
        while iterator:
            response = client.get_records(ShardIterator=iterator, Limit=limit)
            batch = response["Records"]
            if not batch:
                break
            last = time.monotonic()
            first = first or last
            count += len(batch)
            for record in batch:  # touch what a reader needs, as the consumer does
                _ = (record["Data"], record["PartitionKey"], record["SequenceNumber"])
            iterator = response.get("NextShardIterator")
        spans.append((first, last, count))

    with ThreadPoolExecutor(len(shards)) as pool:
        list(pool.map(read, shards))
    return sum(c for _, _, c in spans) / (max(s[1] for s in spans) - min(s[0] for s in spans))


def consumer_read(config: Config, records: int, slots: int) -> float:
    consumer = KinesisSystemFactory().get_consumer("kinesis", config)
    consumer.committed_offsets = list  # nothing checkpointed: a pure read
    ssps = {SystemStreamPartition("kinesis", STREAM, p) for p in range(slots)}
    for ssp in ssps:
        consumer.register(ssp, "TRIM_HORIZON")
    consumer.start()
    count = 0
    first = None
    try:
        while count < records:
            for batch in consumer.poll(ssps, 0.1).values():
                first = first or time.monotonic()
                count += len(batch)
        assert first is not None
        return count / (time.monotonic() - first)
    finally:
        consumer.stop()


def job_rate(config: Config, done: Any) -> float:
    runner = InProcessRunner(config)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("r", runner.run()), daemon=True)
    thread.start()
    while not done():
        if not thread.is_alive():
            raise RuntimeError(f"the job ended early: {outcome.get('r')}")
        time.sleep(0.05)
    runner.request_stop()
    thread.join()
    result = outcome["r"]
    assert result.outcome == "stopped", result.error
    return sum(c.messages / c.processing_seconds for c in result.containers if c.processing_seconds > 0)


def log_count(root: Path) -> int:
    admin = LogSystemFactory().get_admin("log", Settings({"systems.log.path": str(root / "log")}))
    metadata = admin.get_system_stream_metadata(["bench-out"]).get("bench-out")
    return 0 if metadata is None else sum(int(p.upcoming_offset) for p in metadata.partitions.values())


def spark_rate(config: Config, root: Path, records: int) -> float:
    from millstream.spark.run.runner import SparkJobRunner

    runner = SparkJobRunner(config, master="local[3]")
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("r", runner.run()), daemon=True)
    thread.start()
    while log_count(root) < records:
        if not thread.is_alive():
            raise RuntimeError(f"the job ended early: {outcome.get('r')}")
        time.sleep(0.2)
    runner.request_stop()
    thread.join()
    result = outcome["r"]
    assert result.outcome == "stopped", result.error
    return sum(c.messages / c.processing_seconds for c in result.containers if c.processing_seconds > 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--limit", type=int, default=1000, help="records per GetRecords call, for both readers")
    parser.add_argument("--spark", action="store_true", help="also run the pass-through through the Spark runner")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-kinesis-bench-"))
    with Kinesalite() as emulator:
        counting = "benchmarks.kinesis_passthrough:CountingNoOp"
        config = config_for(emulator.endpoint, root, "consumer", counting, args.limit)
        admin = KinesisSystemFactory().get_admin("kinesis", config)
        admin.create_stream(StreamSpec("kinesis", STREAM, args.shards))
        client = admin.clients.client
        written = write_records(client, args.records, args.size)
        shards = [shard.shard_id for shard in admin.list_shards(STREAM)]
        print(f"{args.records:,} records of {args.size} B over {args.shards} shards (written at {written:,.0f}/s)")

        raw = max(raw_read(client, shards, args.limit) for _ in range(2))
        print(f"{'raw boto3 reader':<26}{raw:>10,.0f} records/s  {1:>6.0%}")

        def show(name: str, rate: float) -> None:
            print(f"{name:<26}{rate:>10,.0f} records/s  {rate / raw:>6.0%} of raw")

        show("consumer alone", max(consumer_read(config, args.records, args.shards) for _ in range(2)))
        counted = importlib.import_module("benchmarks.kinesis_passthrough").COUNTED  # not __main__'s copy
        counted["n"] = 0
        no_op = config_for(emulator.endpoint, root, "noop", counting, args.limit)
        show("no-op job (in-process)", job_rate(no_op, lambda: counted["n"] >= args.records))
        LogSystemFactory().get_admin("log", no_op).create_stream(StreamSpec("log", "bench-out", 4))
        through = config_for(emulator.endpoint, root, "through", "benchmarks.tasks:BytesPassThrough", args.limit)
        show("pass-through (in-process)", job_rate(through, lambda: log_count(root) >= args.records))
        if args.spark:
            admin_log = LogSystemFactory().get_admin("log", no_op)
            admin_log.clear_stream(StreamSpec("log", "bench-out"))
            admin_log.create_stream(StreamSpec("log", "bench-out", 4))
            spark = config_for(emulator.endpoint, root, "spark", "benchmarks.tasks:BytesPassThrough", args.limit, 2)
            show("pass-through (Spark, 2)", spark_rate(spark, root, args.records))

    per_call = 10_000
    by_calls = 5 * per_call
    by_bytes = (2 * 1024 * 1024) / max(args.size, 1)
    bound = min(by_calls, by_bytes)
    print(
        f"\nOn AWS each shard serves 5 GetRecords/s and 2 MiB/s to all its readers: with {args.size} B records at most "
        f"{bound:,.0f} records/s per shard ({'bytes' if by_bytes < by_calls else 'calls'} bound), "
        f"{bound * args.shards:,.0f}/s for {args.shards} shards, shared by every application reading the stream."
    )


if __name__ == "__main__":
    main()
