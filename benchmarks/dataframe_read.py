"""Reading a stream as a DataFrame (format ``millstream``) vs. the system's own consumer, for the embedded
log, Kafka (a real broker) and Kinesis (kinesalite), on the same data, as ratios in one run.

    python -m benchmarks.dataframe_read [--messages 400000] [--kinesis-messages 40000] [--partitions 2]
                                        [--runs 2] [--systems log,kafka,kinesis] [--bootstrap HOST:PORT]

Writes JSON values of about 100 bytes with each system's producer, then reports records per second of:
  consumer        the system's millstream consumer alone in one process, polling every partition from the
                  oldest record until all were read (the log's, Kafka's, Kinesis's lease-based one)
  DataFrame raw   ``spark.read.format("millstream").option("raw", "true")``, summing the values' lengths
  DataFrame json  the same with the values decoded by the stream's serde (json) into JSON text
Spark runs local[N] with N = partitions, one task per partition (per shard for Kinesis); a DataFrame rate
is the records over the wall time of the whole query (planning included), best of ``--runs`` after one
warm-up query, each run a new DataFrame (collecting the same one again reuses its shuffle output, skipping
the read); a consumer rate is the best of ``--runs`` reads. A Kafka broker is started from the test
harness unless ``--bootstrap`` names one; kinesalite is started from the test harness.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml
from pyspark.sql import DataFrame, SparkSession, functions

from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.model import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition
from millstream.spark.datasource import register
from millstream.spark.run.session import build_session

STREAM = "bench"
SYSTEMS = ("log", "kafka", "kinesis")


def value_of(index: int) -> bytes:
    return orjson.dumps({"user": f"u{index % 1000}", "page": f"/page/{index % 97}", "n": index, "pad": "x" * 40})


def write_json(config: Config, stream: SystemStream, partitions: int, messages: int) -> None:
    """Create the stream and write ``messages`` keyed JSON values with the system's own producer."""
    factory = system_factory(config, stream.system)
    with factory.get_admin(stream.system, config) as admin:
        admin.start()
        admin.create_stream(StreamSpec(stream.system, stream.stream, partitions))
    with factory.get_producer(stream.system, config) as producer:
        producer.start()
        for index in range(messages):
            producer.send("bench", OutgoingMessageEnvelope(stream, value_of(index), b"k%d" % index))
        producer.flush("bench")


def consumer_rate(config: Config, stream: SystemStream, messages: int, start: str, slots: int) -> float:
    """The system's consumer alone: every record from ``start``, records/s from the first one received."""
    consumer = system_factory(config, stream.system).get_consumer(stream.system, config)
    if hasattr(consumer, "committed_offsets"):
        consumer.committed_offsets = list  # Kinesis: nothing checkpointed, a pure read
    ssps = {SystemStreamPartition(stream.system, stream.stream, p) for p in range(slots)}
    for ssp in ssps:
        consumer.register(ssp, start)
    consumer.start()
    count, first = 0, None
    try:
        while count < messages:
            for batch in consumer.poll(ssps, 0.1).values():
                first = first or time.perf_counter()
                count += len(batch)
        assert first is not None
        return count / max(time.perf_counter() - first, 1e-9)
    finally:
        consumer.stop()


def dataframe_rate(
    spark: SparkSession, config_file: Path, stream: SystemStream, raw: bool, messages: int, runs: int
) -> float:
    def query() -> DataFrame:
        """A new DataFrame each run: collecting one twice reuses its shuffle output and skips the read."""
        df = spark.read.format("millstream").option("config", str(config_file)).option("stream", str(stream))
        return (
            df.option("raw", str(raw).lower())
            .load()
            .agg(functions.count("*"), functions.sum(functions.length("value")))
        )

    (warm,) = query().collect()
    assert warm[0] == messages, f"{stream}: the DataFrame read {warm[0]} records of {messages}"
    best = 0.0
    for _ in range(runs):
        started = time.perf_counter()
        (counted,) = query().collect()
        best = max(best, counted[0] / (time.perf_counter() - started))
    return best


@contextmanager
def system_values(system: str, root: Path, bootstrap: str | None) -> Iterator[dict[str, str]]:
    """The config values of one system named ``system``, with its broker or emulator running meanwhile."""
    serdes = {f"systems.{system}.samza.msg.serde": "json", f"systems.{system}.samza.key.serde": "string"}
    if system == "log":
        yield {"systems.log.path": str(root / "log"), **serdes}
    elif system == "kafka":
        values = {"systems.kafka.samza.factory": "kafka", **serdes}
        if bootstrap:
            yield {**values, "systems.kafka.bootstrap.servers": bootstrap}
            return
        from tests.integration.kafka_broker import KafkaBroker

        with KafkaBroker(root / "broker", log_level="WARN") as broker:
            yield {**values, "systems.kafka.bootstrap.servers": broker.bootstrap_servers}
    else:
        from tests.integration.kinesis.emulator import ACCESS_KEY, REGION, SECRET_KEY, Kinesalite

        with Kinesalite() as emulator:
            yield {
                "systems.kinesis.samza.factory": "kinesis",
                "systems.kinesis.aws.endpoint": emulator.endpoint,
                "systems.kinesis.aws.region": REGION,
                "systems.kinesis.aws.accessKey": ACCESS_KEY,
                "sensitive.systems.kinesis.aws.secretKey": SECRET_KEY,
                "systems.kinesis.consumer.initial.position": "TRIM_HORIZON",
                "systems.kinesis.consumer.shard.getrecords.per.second": "1000",
                "systems.kinesis.consumer.shard.bytes.per.second": str(1 << 30),
                "systems.kinesis.consumer.idle.ms": "20",
                **serdes,
            }


def measure(system: str, args: Any, root: Path, spark: Callable[[], SparkSession]) -> list[tuple[str, float]]:
    messages = args.kinesis_messages if system == "kinesis" else args.messages
    with system_values(system, root, args.bootstrap) as values:
        values = {"job.name": f"bench-{uuid.uuid4().hex[:6]}", "job.data.dir": str(root / "data"), **values}
        config = Settings(values)
        stream = SystemStream(system, f"{STREAM}-{uuid.uuid4().hex[:6]}")
        write_json(config, stream, args.partitions, messages)
        config_file = root / f"{system}.yaml"
        config_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        start = "TRIM_HORIZON" if system == "kinesis" else "0"
        consumer = max(consumer_rate(config, stream, messages, start, args.partitions) for _ in range(args.runs))
        rows = [(f"{system} consumer ({messages:,} records)", consumer)]
        for name, raw in (("DataFrame raw", True), ("DataFrame json", False)):
            rows.append((f"{system} {name}", dataframe_rate(spark(), config_file, stream, raw, messages, args.runs)))
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=400_000, help="records of the log and Kafka streams")
    parser.add_argument("--kinesis-messages", type=int, default=40_000, help="records of the Kinesis stream")
    parser.add_argument("--partitions", type=int, default=2, help="partitions (shards for Kinesis)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--bootstrap", help="an existing Kafka broker (default: start one from the test harness)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, ignore_errors=True)
        sessions: list[SparkSession] = []

        def spark() -> SparkSession:
            if not sessions:
                sessions.append(build_session(Settings({}), master=f"local[{args.partitions}]"))
                register(sessions[0])
                stack.callback(sessions[0].stop)
            return sessions[0]

        print(f"JSON records of about 100 bytes over {args.partitions} partitions")
        for system in args.systems.split(","):
            rows = measure(system, args, root, spark)
            base = rows[0][1]
            for name, rate in rows:
                print(f"{name:<40}{rate:>12,.0f} records/s  {rate / base:>6.0%} of the consumer", flush=True)


if __name__ == "__main__":
    main()
