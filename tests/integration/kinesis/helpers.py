"""Building blocks of the Kinesis tests: config for a Kinesis system, a raw boto3 client, writing and reading."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config as BotoConfig

from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.connectors.kinesis.admin import KinesisSystemAdmin
from millstream.connectors.kinesis.consumer import SEQUENCE_NUMBER_HEADER, SHARD_ID_HEADER, KinesisSystemConsumer
from millstream.connectors.kinesis.factory import KinesisSystemFactory
from millstream.coordinator.prepare import prepare
from millstream.model import IncomingMessageEnvelope, SystemStreamPartition
from tests.helpers import wait_until
from tests.integration.kinesis.emulator import ACCESS_KEY, REGION, SECRET_KEY

SYSTEM = "kinesis"

FAST = {
    "consumer.lease.duration.ms": "2000",
    "consumer.checkpoint.sync.ms": "100",
    "consumer.shard.sync.ms": "500",
    "consumer.idle.ms": "50",
    "consumer.shard.getrecords.per.second": "50",
    "consumer.backoff.initial.ms": "20",
    "consumer.backoff.max.ms": "200",
    "producer.backoff.initial.ms": "5",
    "producer.backoff.max.ms": "50",
}
"""Settings that make tests quick: short leases, frequent syncs (the emulator has no read limits)."""


def kinesis_values(endpoint: str, **extra: Any) -> dict[str, str]:
    values = {
        f"systems.{SYSTEM}.samza.factory": "kinesis",
        f"systems.{SYSTEM}.aws.endpoint": endpoint,
        f"systems.{SYSTEM}.aws.region": REGION,
        f"systems.{SYSTEM}.aws.accessKey": ACCESS_KEY,
        f"sensitive.systems.{SYSTEM}.aws.secretKey": SECRET_KEY,
    }
    values.update({f"systems.{SYSTEM}.{key}": value for key, value in FAST.items()})
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return values


def kinesis_config(endpoint: str, data_dir: Path, **extra: Any) -> Settings:
    """A config with one Kinesis system named ``kinesis`` and a job directory; ``a__b=1`` sets ``a.b=1``."""
    values = {"job.name": "kinesis-test", "job.data.dir": str(data_dir), **kinesis_values(endpoint)}
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    return prepare(Settings(values))


def raw_client(endpoint: str) -> Any:
    return boto3.client(
        "kinesis",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        config=BotoConfig(retries={"total_max_attempts": 3, "mode": "standard"}),
    )


def started_admin(config: Settings) -> KinesisSystemAdmin:
    admin = KinesisSystemFactory().get_admin(SYSTEM, config)
    admin.start()
    return admin


def create_stream(endpoint: str, stream: str, shards: int) -> None:
    client = raw_client(endpoint)
    client.create_stream(StreamName=stream, ShardCount=shards)
    client.get_waiter("stream_exists").wait(StreamName=stream, WaiterConfig={"Delay": 0.1, "MaxAttempts": 300})


def put(endpoint: str, stream: str, records: Iterable[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """PutRecord one by one (order per key kept); returns the responses (ShardId, SequenceNumber)."""
    client = raw_client(endpoint)
    return [client.put_record(StreamName=stream, PartitionKey=key, Data=data) for key, data in records]


def wait_for_arrival_times_to_pass(endpoint: str, stream: str) -> None:
    """Wait until every record of ``stream`` arrived in the past. kinesalite dates a split's children one second
    ahead (their creation time is "now + 1 s", and a record put there before then takes it as its arrival
    time), so a read bounded by "what arrived by now" would leave such records for later."""
    client = raw_client(endpoint)
    arrivals: list[float] = []
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records = client.get_records(ShardIterator=iterator, Limit=10_000)["Records"]
        arrivals.extend(record["ApproximateArrivalTimestamp"].timestamp() for record in records)
    newest = max(arrivals, default=0.0)
    wait_until(lambda: time.time() > newest, 5, "the records' arrival times to pass", interval=0.05)


def shard_and_sequence(envelope: IncomingMessageEnvelope) -> tuple[str, str]:
    headers = envelope.headers or {}
    return headers[SHARD_ID_HEADER].decode(), headers[SEQUENCE_NUMBER_HEADER].decode()


class CheckpointingDriver:
    """Stands in for the engine around one consumer: polls, "processes" and checkpoints what it polled.

    ``committed`` is what the consumer reads as the task checkpoints: the offset of the last envelope
    of each slot, updated by :meth:`commit`.
    """

    def __init__(self) -> None:
        self.processed: dict[SystemStreamPartition, str] = {}
        self.committed: dict[SystemStreamPartition, str] = {}
        self.envelopes: list[IncomingMessageEnvelope] = []

    def committed_offsets(self) -> list[tuple[SystemStreamPartition, str | None]]:
        return list(self.committed.items())

    def poll(self, consumer: KinesisSystemConsumer, ssps: set[SystemStreamPartition], timeout: float = 0.1) -> int:
        count = 0
        for ssp, batch in consumer.poll(ssps, timeout).items():
            self.envelopes.extend(batch)
            self.processed[ssp] = batch[-1].offset
            count += len(batch)
        return count

    def commit(self) -> None:
        self.committed = dict(self.processed)

    def run_until(
        self,
        consumer: KinesisSystemConsumer,
        ssps: set[SystemStreamPartition],
        done: Callable[[], bool],
        timeout: float = 30.0,
        commit_every: float = 0.1,
    ) -> None:
        deadline = time.monotonic() + timeout
        next_commit = time.monotonic()
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"not done within {timeout}s; {len(self.envelopes)} envelopes polled")
            self.poll(consumer, ssps)
            if time.monotonic() >= next_commit:
                self.commit()
                next_commit = time.monotonic() + commit_every

    def payloads(self) -> list[bytes]:
        return [envelope.message for envelope in self.envelopes]


def make_consumer(config: Settings, committed: Callable[[], Any] | None = None) -> KinesisSystemConsumer:
    """The factory's consumer, reading task checkpoints from ``committed`` when given."""
    consumer = KinesisSystemFactory().bind(system_factory(config, SYSTEM).context).get_consumer(SYSTEM, config)
    if committed is not None:
        consumer.committed_offsets = committed
    return consumer


def wait_for(probe: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def wait_for_reads(consumer: KinesisSystemConsumer, calls: int) -> None:
    """Until the consumer's shard readers made ``calls`` more GetRecords calls. Whatever else the shards hold
    has been fetched by then, so a poll afterwards shows it: the way to check that nothing more arrives."""
    made = consumer.metrics.get_records_calls
    wait_until(lambda: consumer.metrics.get_records_calls >= made + calls, 30, f"{calls} more GetRecords calls")
