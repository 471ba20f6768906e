"""The Kinesis producer against kinesalite: partition keys, explicit hash keys, batching, per-record retries."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from botocore.exceptions import ClientError

from millstream.connectors.kinesis.errors import KinesisProduceError, KinesisSystemError
from millstream.connectors.kinesis.factory import KinesisSystemFactory
from millstream.connectors.kinesis.producer import headers_with_explicit_hash_key
from millstream.connectors.kinesis.shards import ShardLineage
from millstream.contracts.systems import StreamSpec
from millstream.model import OutgoingMessageEnvelope, SystemStream
from tests.integration.kinesis.helpers import SYSTEM, kinesis_config, raw_client, started_admin

pytestmark = pytest.mark.integration


@pytest.fixture
def config(kinesis_endpoint, tmp_path):
    return kinesis_config(kinesis_endpoint, tmp_path)


@pytest.fixture
def stream(config, stream_name):
    name = stream_name()
    admin = started_admin(config)
    admin.create_stream(StreamSpec(SYSTEM, name, 2))
    return name


def producer_of(config):
    producer = KinesisSystemFactory().get_producer(SYSTEM, config)
    producer.start()
    return producer


def read_all(endpoint: str, stream: str) -> dict[str, list[dict[str, Any]]]:
    """Every record of every shard, by shard, in shard order."""
    client = raw_client(endpoint)
    result = {}
    for shard in client.list_shards(StreamName=stream)["Shards"]:
        iterator = client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records: list[dict[str, Any]] = []
        while iterator:
            response = client.get_records(ShardIterator=iterator)
            records.extend(response["Records"])
            if not response["Records"]:
                break
            iterator = response.get("NextShardIterator")
        result[shard["ShardId"]] = records
    return result


def envelope(stream: str, value: bytes | None, key: bytes | None = None, **options: Any) -> OutgoingMessageEnvelope:
    return OutgoingMessageEnvelope(SystemStream(SYSTEM, stream), value, key, **options)


def test_records_go_to_the_shard_their_partition_key_hashes_to(config, kinesis_endpoint, stream):
    producer = producer_of(config)
    for i in range(40):
        producer.send("task", envelope(stream, b"v%d" % i, b"key-%d" % (i % 8)))
    producer.send("task", envelope(stream, b"by-partition-key", b"ignored", partition_key=b"key-1"))
    producer.flush("task")
    lineage = ShardLineage(started_admin(config).list_shards(stream))
    by_shard = read_all(kinesis_endpoint, stream)
    assert sum(map(len, by_shard.values())) == 41
    for shard, records in by_shard.items():
        for record in records:
            owner = lineage.shard_for_key(record["PartitionKey"])
            assert owner is not None and owner.shard_id == shard
    same_key = [r["Data"] for records in by_shard.values() for r in records if r["PartitionKey"] == "key-3"]
    assert same_key == [b"v3", b"v11", b"v19", b"v27", b"v35"], "one key: one shard, in send order"


def test_an_explicit_hash_key_header_pins_the_shard(config, kinesis_endpoint, stream):
    producer = producer_of(config)
    upper = started_admin(config).list_shards(stream)[1]
    producer.send("t", envelope(stream, b"pinned", b"k", headers=headers_with_explicit_hash_key(upper.ending_hash_key)))
    producer.send("t", envelope(stream, b"low", b"k", headers=headers_with_explicit_hash_key(0)))
    producer.flush("t")
    by_shard = read_all(kinesis_endpoint, stream)
    assert [r["Data"] for r in by_shard[upper.shard_id]] == [b"pinned"]
    assert [r["Data"] for r in by_shard["shardId-000000000000"]] == [b"low"]
    with pytest.raises(KinesisSystemError, match=r"kinesis\.explicit\.hash\.key"):
        producer.send("t", envelope(stream, b"x", headers={"kinesis.explicit.hash.key": b"-1"}))


def test_records_are_batched_into_put_records_calls_of_at_most_500(config, kinesis_endpoint, stream):
    producer = producer_of(config)
    for i in range(1200):
        producer.send("t", envelope(stream, b"%d" % i, b"k%d" % i))
    assert producer.metrics.put_records_calls == 2, "two full batches went out while sending"
    producer.flush("t")
    assert producer.metrics.put_records_calls == 3
    assert producer.metrics.records_written == 1200
    assert sum(map(len, read_all(kinesis_endpoint, stream).values())) == 1200


class FlakyPutRecords:
    """Makes Kinesis refuse chosen records of a PutRecords call, as it does under load (per record)."""

    def __init__(self, client: Any, fail: Any, code: str = "ProvisionedThroughputExceededException") -> None:
        self.real = client.put_records
        self.fail = fail
        self.code = code
        self.attempts: dict[bytes, int] = defaultdict(int)

    def __call__(self, **arguments: Any) -> dict[str, Any]:
        stream, records = arguments["StreamName"], arguments["Records"]
        accepted: list[dict[str, Any]] = []
        results: list[dict[str, Any] | None] = []
        for record in records:
            self.attempts[record["Data"]] += 1
            if self.fail(record, self.attempts[record["Data"]]):
                results.append({"ErrorCode": self.code, "ErrorMessage": "Rate exceeded for shard"})
            else:
                accepted.append(record)
                results.append(None)
        written = iter(self.real(StreamName=stream, Records=accepted)["Records"] if accepted else [])
        merged = [result if result is not None else next(written) for result in results]
        return {"FailedRecordCount": sum(1 for r in merged if "ErrorCode" in r), "Records": merged}


def test_failed_records_of_a_call_are_retried_alone_and_counted(config, kinesis_endpoint, stream, monkeypatch):
    producer = producer_of(config)
    flaky = FlakyPutRecords(
        producer.clients.client, lambda record, attempt: attempt <= 2 and int(record["Data"]) % 3 == 0
    )
    monkeypatch.setattr(producer.clients.client, "put_records", flaky)
    sent = [b"%03d" % i for i in range(90)]
    for data in sent:
        producer.send("t", envelope(stream, data, data))
    producer.flush("t")
    written = [r["Data"] for records in read_all(kinesis_endpoint, stream).values() for r in records]
    assert sorted(written) == sent, "every record exactly once"
    metrics = producer.metrics.snapshot()
    assert metrics["records_retried"] == 2 * 30
    assert metrics["throttled_by_operation"] == {"PutRecords": 60}
    assert max(flaky.attempts.values()) == 3


def test_a_record_out_of_attempts_fails_the_flush_naming_stream_and_key(
    kinesis_endpoint, tmp_path, stream, monkeypatch
):
    config = kinesis_config(kinesis_endpoint, tmp_path, systems__kinesis__producer__max__attempts=3)
    producer = producer_of(config)
    flaky = FlakyPutRecords(
        producer.clients.client, lambda record, attempt: record["Data"] == b"doomed", "InternalFailure"
    )
    monkeypatch.setattr(producer.clients.client, "put_records", flaky)
    producer.send("t", envelope(stream, b"fine", b"a"))
    producer.send("t", envelope(stream, b"doomed", b"the-key"))
    with pytest.raises(KinesisProduceError, match=rf"stream '{stream}'.*'the-key'.*InternalFailure") as raised:
        producer.flush("t")
    assert raised.value.stream == stream and raised.value.partition_key == "the-key"
    assert flaky.attempts[b"doomed"] == 3
    producer.flush("t")  # reported once; nothing left to send
    assert [r["Data"] for rs in read_all(kinesis_endpoint, stream).values() for r in rs] == [b"fine"]


def test_with_preserve_key_order_a_retried_record_stays_ahead_of_later_records_of_its_key(
    kinesis_endpoint, tmp_path, stream, monkeypatch
):
    config = kinesis_config(kinesis_endpoint, tmp_path, systems__kinesis__producer__preserve__key__order="true")
    producer = producer_of(config)
    flaky = FlakyPutRecords(
        producer.clients.client, lambda record, attempt: attempt == 1 and record["Data"].endswith(b"-0")
    )
    monkeypatch.setattr(producer.clients.client, "put_records", flaky)
    for n in range(5):
        for key in ("a", "b", "c"):
            producer.send("t", envelope(stream, f"{key}-{n}".encode(), key.encode()))
    producer.flush("t")
    by_key: dict[str, list[bytes]] = defaultdict(list)
    for records in read_all(kinesis_endpoint, stream).values():
        for record in records:
            by_key[record["PartitionKey"]].append(record["Data"])
    for key in ("a", "b", "c"):
        assert by_key[key] == [f"{key}-{n}".encode() for n in range(5)]


def test_a_whole_call_refused_for_a_missing_stream_fails_at_once(config):
    producer = producer_of(config)
    producer.send("t", envelope("no-such-stream", b"x", b"k"))
    with pytest.raises(KinesisProduceError, match=r"no-such-stream.*ResourceNotFoundException"):
        producer.flush("t")


def test_records_kinesis_cannot_hold_are_refused_at_send(config, stream):
    producer = producer_of(config)
    with pytest.raises(KinesisSystemError, match="no tombstones"):
        producer.send("t", envelope(stream, None, b"k"))
    with pytest.raises(KinesisProduceError, match="1 MiB"):
        producer.send("t", envelope(stream, b"x" * (1024 * 1024), b"k"))
    with pytest.raises(KinesisSystemError, match="256 characters"):
        producer.send("t", envelope(stream, b"x", b"k" * 257))
    with pytest.raises(KinesisSystemError, match=r"cannot send to 'log\.x'"):
        producer.send("t", OutgoingMessageEnvelope(SystemStream("log", "x"), b"v"))


def test_a_throttled_call_is_backed_off_and_retried(config, kinesis_endpoint, stream, monkeypatch):
    producer = producer_of(config)
    client = producer.clients.client
    real = client.put_records
    calls = []

    def throttled_twice(**arguments):
        calls.append(1)
        if len(calls) <= 2:
            raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException"}}, "PutRecords")
        return real(**arguments)

    monkeypatch.setattr(client, "put_records", throttled_twice)
    producer.send("t", envelope(stream, b"v", b"k"))
    producer.flush("t")
    assert len(calls) == 3
    assert producer.metrics.throttled_calls == 2
    assert sum(map(len, read_all(kinesis_endpoint, stream).values())) == 1
