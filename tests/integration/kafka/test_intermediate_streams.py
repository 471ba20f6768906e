"""A high-level application split into two separately run jobs, its intermediate stream on the real broker,
through the Spark runner: a backfill (event times from 1970) keeps every record until stage 1 has read it,
stage 1 deletes exactly what it checkpointed, and a stage 1 that finds records gone refuses to start."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.spark.run.runner import SparkJobRunner
from tests.api.apps import app_config, messages, reference_counts
from tests.spark.test_application import output, setup

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def stages(tmp_path, bootstrap: str, app_id: str) -> tuple[Settings, Settings]:
    kafka = {
        "app__intermediate__system": "kafka",
        "app__id": app_id,
        "systems__kafka__samza__factory": "kafka",
        "systems__kafka__bootstrap__servers": bootstrap,
    }
    upstream, downstream = (
        app_config(tmp_path, "tests.api.apps:WindowedCount", app__stage=stage, **kafka) for stage in (0, 1)
    )
    return upstream, downstream


def run_upstream(spark: SparkSession, upstream: Settings) -> dict[int, list]:
    data = {p: messages(p, 60, start=1) for p in range(2)}  # event times in 1970: far past any default retention
    setup(upstream, data)
    result = SparkJobRunner(upstream, spark=spark).run()
    assert result.outcome == "finished", result.error
    return data


def log_start_and_end(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer_config = {"bootstrap.servers": bootstrap, "group.id": "inspect", "enable.auto.commit": False}
    from confluent_kafka import Consumer

    consumer = Consumer(consumer_config)
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in range(partitions)}
    finally:
        consumer.close()


def checkpointed(config: Settings, topic: str) -> dict[int, int]:
    store = metadata_store(config)
    manager = checkpoint_manager(config, store)
    manager.start()
    try:
        return {
            ssp.partition: int(offset)
            for checkpoint in manager.read_all().values()
            for ssp, offset in checkpoint.offsets.items()
            if ssp.stream == topic and offset is not None
        }
    finally:
        manager.stop()
        store.close()


def test_a_backfill_across_two_separately_run_stages_gives_exact_windows_and_stage_1_purges_what_it_checkpointed(
    spark, bootstrap, tmp_path, topic_name
):
    app_id = topic_name("app")
    upstream, downstream = stages(tmp_path, bootstrap, app_id)
    data = run_upstream(spark, upstream)
    topic = f"test-{app_id}-by-user"
    described = AdminClient({"bootstrap.servers": bootstrap}).describe_configs
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    topic_config = described([resource])[resource].result(30)
    assert (topic_config["retention.ms"].value, topic_config["retention.bytes"].value) == ("-1", "-1")
    written = log_start_and_end(bootstrap, topic, 2)
    # kept whole; a partition no user hashes to may be empty: end-of-stream reaches it through the aggregating
    # partition, forwarded by the consuming stage (docs/event-time.md)
    assert all(start == 0 for start, _ in written.values()), written
    assert sum(end for _, end in written.values()) >= sum(len(pairs) for pairs in data.values()), written

    result = SparkJobRunner(downstream, spark=spark).run()
    assert result.outcome == "finished", result.error
    assert {(r["user"], r["start"]): r["count"] for r in output(downstream) if "count" in r} == reference_counts(data)
    last = checkpointed(downstream, topic)
    after = log_start_and_end(bootstrap, topic, 2)
    assert {p: start for p, (start, _) in after.items()} == {p: offset + 1 for p, offset in last.items()}


def test_a_fresh_stage_1_on_an_intermediate_topic_that_lost_records_fails_naming_them(
    spark, bootstrap, tmp_path, topic_name
):
    app_id = topic_name("app")
    upstream, downstream = stages(tmp_path, bootstrap, app_id)
    run_upstream(spark, upstream)
    topic = f"test-{app_id}-by-user"
    ends = {p: end for p, (_, end) in log_start_and_end(bootstrap, topic, 2).items()}
    partition = max(ends, key=lambda p: ends[p])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, partition, 5)]).values():
        future.result(30)  # what the broker's retention did to a backfill before intermediate topics kept everything

    result = SparkJobRunner(downstream, spark=spark).run()
    assert result.outcome == "failed"
    assert (
        f"stream 'kafka.{topic}' partition {partition}: reading the intermediate stream from its start, but offsets 0 "
        "up to 5 (exclusive) were already deleted" in (result.error or "")
    )
    assert not [r for r in output(downstream) if "count" in r]
