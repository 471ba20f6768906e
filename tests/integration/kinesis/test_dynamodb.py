"""Shard leases and checkpoints in a DynamoDB table (moto's server) instead of the metadata store."""

from __future__ import annotations

import time

import orjson
import pytest

from millstream.composition.metadata import metadata_store
from millstream.connectors.kinesis.dynamodb import DynamoDBLeaseStore
from millstream.connectors.kinesis.leases import LEASE_NAMESPACE
from millstream.model import SystemStreamPartition
from tests.integration.kinesis.emulator import ACCESS_KEY, REGION, SECRET_KEY
from tests.integration.kinesis.helpers import (
    SYSTEM,
    CheckpointingDriver,
    create_stream,
    kinesis_config,
    make_consumer,
    put,
    started_admin,
    wait_for_reads,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def config(kinesis_endpoint, dynamodb_endpoint, tmp_path):
    return kinesis_config(
        kinesis_endpoint,
        tmp_path,
        systems__kinesis__consumer__initial__position="TRIM_HORIZON",
        systems__kinesis__consumer__lease__store="dynamodb",
        systems__kinesis__aws__dynamodb__endpoint=dynamodb_endpoint,
        systems__kinesis__consumer__application__name=f"app-{time.monotonic_ns()}",
    )


def dynamodb(endpoint: str):
    import boto3

    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
    )


def test_compare_and_put_in_dynamodb_is_conditional_on_the_expected_records(dynamodb_endpoint):
    store = DynamoDBLeaseStore(SYSTEM, lambda: dynamodb(dynamodb_endpoint), f"t-{time.monotonic_ns()}")
    store.init()
    assert store.compare_and_put("ns", "a", b"1", {("ns", "a"): None})
    assert not store.compare_and_put("ns", "a", b"2", {("ns", "a"): None}), "exists already"
    assert not store.compare_and_put("ns", "a", b"2", {("ns", "a"): b"0"}), "stale expectation"
    assert store.compare_and_put("ns", "a", b"2", {("ns", "a"): b"1"})
    assert not store.compare_and_put("ns", "b", b"x", {("ns", "a"): b"1"}), "another record's expectation"
    assert store.compare_and_put("ns", "b", b"x", {("ns", "a"): b"2", ("ns", "b"): None})
    store.put("other", "c", b"3")
    assert store.all("ns") == {"a": b"2", "b": b"x"}
    store.delete("ns", "b")
    assert store.get("ns", "b") is None and store.get("ns", "a") == b"2"


def test_a_consumer_keeps_leases_and_checkpoints_in_dynamodb_and_the_next_one_resumes_from_them(
    config, kinesis_endpoint, dynamodb_endpoint, stream_name
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    put(kinesis_endpoint, stream, [("k", b"%d" % i) for i in range(10)])
    started_admin(config).split_shard(stream, "shardId-000000000000")
    put(kinesis_endpoint, stream, [("k", b"%d" % i) for i in range(10, 20)])
    ssps = {SystemStreamPartition(SYSTEM, stream, 0)}
    first = CheckpointingDriver()
    consumer = make_consumer(config, first.committed_offsets)
    consumer.register(next(iter(ssps)), "TRIM_HORIZON")
    consumer.start()
    try:
        first.run_until(consumer, ssps, lambda: len(first.envelopes) >= 20)
        first.commit()  # consumer.stop() copies it to the lease table
    finally:
        consumer.stop()
    assert first.payloads() == [b"%d" % i for i in range(20)], "the parent, then its child, in key order"

    table = f"millstream-{config['systems.kinesis.consumer.application.name']}"
    items = dynamodb(dynamodb_endpoint).scan(TableName=table)["Items"]
    leases = {
        item["key"]["S"].rpartition("/")[2]: orjson.loads(item["value"]["B"])
        for item in items
        if "/shard/" in item["key"]["S"]
    }
    assert leases["shardId-000000000000"]["position"]["type"] == "SHARD_END"
    child = next(shard for shard, lease in leases.items() if lease["position"]["type"] == "AFTER_SEQUENCE_NUMBER")
    assert leases[child]["parents"] == ["shardId-000000000000"]
    assert metadata_store(config).all(LEASE_NAMESPACE) == {}, "nothing in the metadata store"

    put(kinesis_endpoint, stream, [("k", b"20")])
    second = CheckpointingDriver()
    consumer = make_consumer(config, second.committed_offsets)
    consumer.register(next(iter(ssps)), "TRIM_HORIZON")
    consumer.start()
    try:
        second.run_until(consumer, ssps, lambda: len(second.envelopes) >= 1)
        wait_for_reads(consumer, 4)
        second.poll(consumer, ssps)
    finally:
        consumer.stop()
    assert second.payloads() == [b"20"]
