"""Kinesis jobs through the Spark runner: resharding under load, shared slots, restarts, a killed container."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

import pytest
from pyspark.sql import SparkSession

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.connectors.kinesis.leases import LEASE_NAMESPACE, Lease
from millstream.contracts import coordination
from millstream.coordinator.job_result import JobResult
from millstream.spark.run.runner import SparkJobRunner
from tests.integration.kinesis.helpers import create_stream, started_admin
from tests.integration.kinesis.jobs_support import (
    Loader,
    check_key_order,
    check_parents_before_children,
    job_config,
    output,
    seen,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.spark]


class BackgroundJob:
    def __init__(self, config: Settings, spark: SparkSession) -> None:
        self.runner = SparkJobRunner(config, spark=spark)
        self.result: dict[str, JobResult] = {}
        self.thread = threading.Thread(target=lambda: self.result.setdefault("r", self.runner.run()), daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 60) -> JobResult:
        self.runner.request_stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the job did not stop"
        return self.result["r"]

    def check_alive(self) -> bool:
        if not self.thread.is_alive():
            raise AssertionError(f"the job ended early: {self.result.get('r')}")
        return True


def leases(config: Settings) -> dict[str, Lease]:
    found = {}
    for key, data in metadata_store(config).all(LEASE_NAMESPACE).items():
        if "/shard/" in key:
            lease = Lease.from_bytes(data, key)
            found[lease.shard_id] = lease
    return found


def lineage(config: Settings, stream: str) -> dict[str, tuple[str, ...]]:
    admin = started_admin(config)
    return {shard.shard_id: shard.parents for shard in admin.list_shards(stream)}


def test_splits_and_merges_under_load_lose_nothing_and_keep_parents_before_children_and_key_order(
    spark, kinesis_endpoint, stream_name, tmp_path
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 2)
    config = job_config(kinesis_endpoint, tmp_path, stream, job__container__count=2)
    admin = started_admin(config)
    loader = Loader(kinesis_endpoint, stream).start()
    job = BackgroundJob(config, spark)
    try:
        wait_until(lambda: job.check_alive() and len(seen(config)) >= 200, 90, "first records processed")
        admin.split_shard(stream, "shardId-000000000000")  # → 2 and 3, children of 0
        wait_until(
            lambda: {"shardId-000000000002", "shardId-000000000003"} <= {r["shard"] for r in output(config)},
            60,
            "children of the split read",
        )
        admin.merge_shards(stream, "shardId-000000000003", "shardId-000000000001")  # → 4
        wait_until(
            lambda: "shardId-000000000004" in {r["shard"] for r in output(config)}, 60, "child of the merge read"
        )
    finally:
        loader.stop()
    written = loader.all_written()
    wait_until(lambda: seen(config) >= written, 60, "every record processed")
    result = job.stop()
    assert result.outcome == "stopped", result.error

    records = output(config)
    assert {(r["key"], r["n"]) for r in records} == written
    check_key_order(records, loader.written)
    shards = lineage(config, stream)
    assert shards["shardId-000000000004"] == ("shardId-000000000003", "shardId-000000000001")
    assert check_parents_before_children(records, shards) >= 4
    finished = {shard for shard, lease in leases(config).items() if lease.finished}
    assert {"shardId-000000000000", "shardId-000000000001", "shardId-000000000003"} <= finished


def test_a_split_without_a_free_slot_shares_one_with_composite_offsets_and_a_restart_maps_one_to_one(
    spark, kinesis_endpoint, stream_name, tmp_path
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 1)
    config = job_config(kinesis_endpoint, tmp_path, stream, job__container__count=1)
    admin = started_admin(config)
    loader = Loader(kinesis_endpoint, stream)
    loader.write(3)
    job = BackgroundJob(config, spark)
    wait_until(lambda: job.check_alive() and len(seen(config)) >= loader.count, 90, "first records processed")
    admin.split_shard(stream, "shardId-000000000000")
    loader.write(10)
    wait_until(lambda: job.check_alive() and seen(config) >= loader.all_written(), 60, "records of both children")
    first = job.stop()
    assert first.outcome == "stopped", first.error

    records = output(config)
    children = {"shardId-000000000001", "shardId-000000000002"}
    assert {r["slot"] for r in records} == {0}, "one container, one shard at start: one slot"
    composite = [r["offset"] for r in records if r["shard"] in children and "," in r["offset"]]
    assert composite, "the children shared the slot: their offsets name both"
    assert all({entry.split(":")[0] for entry in offset.split(",")} == children for offset in composite)
    (checkpoint,) = checkpoint_manager(config, metadata_store(config)).read_all().values()
    (offset,) = checkpoint.offsets.values()
    assert offset is not None
    assert {entry.split(":")[0] for entry in offset.split(",")} == children, offset
    check_key_order(records, loader.written)

    before = len(records)
    loader.write(10)
    job = BackgroundJob(config, spark)
    wait_until(lambda: job.check_alive() and seen(config) >= loader.all_written(), 90, "records after the restart")
    second = job.stop()
    assert second.outcome == "stopped", second.error
    assert second.generation == first.generation + 1

    after_restart = output(config)[before:]
    assert {r["slot"] for r in after_restart} == {0, 1}, "two open shards at restart: two slots"
    assert all("," not in r["offset"] for r in after_restart), "one shard per slot again"
    assert len(after_restart) == 10 * loader.keys, "the restart resumed after the checkpoints: no record twice"
    check_key_order(output(config), loader.written)


def test_a_killed_container_s_shards_move_to_the_other_and_come_back_without_losing_records(
    spark, kinesis_endpoint, stream_name, tmp_path
):
    stream = stream_name()
    create_stream(kinesis_endpoint, stream, 4)
    config = job_config(kinesis_endpoint, tmp_path, stream, job__container__count=2, test__delay__seconds=0.002)
    store = metadata_store(config)
    loader = Loader(kinesis_endpoint, stream).start()
    job = BackgroundJob(config, spark)
    try:

        def owners() -> set[Any]:
            return {lease.owner for lease in leases(config).values() if lease.owner is not None}

        wait_until(lambda: job.check_alive() and len(owners()) == 2 and len(seen(config)) >= 100, 90, "both reading")
        victim = int(coordination.container_statuses(store)["0"]["pid"])
        before = owners()
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: job.check_alive() and len(owners()) == 2 and owners() != before, 90, "leases spread again")
        moved = {shard for shard, lease in leases(config).items() if lease.token > 1}
        assert moved, "the dead container's shards changed owner"
    finally:
        loader.stop()
    written = loader.all_written()
    wait_until(lambda: seen(config) >= written, 60, "every record processed")
    result = job.stop()
    assert result.outcome == "stopped", result.error
    assert {c.container_id: c.epoch for c in result.containers}["0"] >= 2
    records = output(config)
    assert {(r["key"], r["n"]) for r in records} == written
    check_key_order(records, loader.written)
