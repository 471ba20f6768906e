"""Issue 38 item 3 through the Spark runner: a stateful count-per-key job, Kafka to Kafka with its store's changelog
on Kafka, all through a black-hole proxy, rides out network blips of 3-5 s and an outage of 45 s (longer than
librdkafka's default request timeout, 30 s, shorter than the deadline, ``systems.kafka.outage.timeout.ms``, here
60 s) with no container failure: every call on the run and commit paths (end offsets, metadata, flushes,
transaction commits) gives up after ``operation.timeout.ms`` (3 s, shorter than every cut) and is retried. Every
key's count is exact, none is sent twice, and a restore gives exactly the counts. Checkpoints and metadata stay in
the local metadata store, so the test watches the container through the cuts."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from millstream.config.settings import Settings
from millstream.model import TaskName
from tests.helpers import wait_until
from tests.integration.conftest import ProxiedKafka
from tests.integration.kafka.helpers import create_topic, job_config, produce
from tests.integration.kafka.test_spark_changelog_faults import (
    MESSAGES_PER_KEY,
    PARTITIONS,
    checkpointed_messages,
    container_status,
    every_key_counted,
    expected_counts,
    final_counts,
    input_records,
)
from tests.integration.kafka.test_spark_local import RunningJob
from tests.integration.network import BlackHoleProxy
from tests.storage.harness import restored_contents

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BLIPS_S = (3.0, 5.0, 4.0)
OUTAGE_S = 45.0
REQUEST_TIMEOUT_MS = 3000
"""Each request gives up well within a blip (as in the fault tests that found issue 38): riding out is retrying."""
OUTAGE_DEADLINE_MS = 60_000


def ride_out_config(tmp_path: Path, kafka: ProxiedKafka, source: str, sink: str, changelog: str) -> Settings:
    return job_config(
        kafka.bootstrap_servers,
        tmp_path / "data",
        source,
        sink,
        job__name=f"ride-out-{uuid.uuid4().hex[:8]}",
        task__class="tests.integration.kafka.jobs:KafkaCountPerKey",
        task__checkpoint__factory="metadata",  # the checkpoints and the container's status stay readable
        metadata__store__factory="sqlite",
        stores__counts__factory="rocksdb",
        stores__counts__key__serde="string",
        stores__counts__msg__serde="json",
        stores__counts__changelog=f"kafka.{changelog}",
        job__container__count=1,
        job__container__retry__count=3,  # a failure would be retried, and seen: the test counts attempts
        task__commit__ms=300,
        test__delay__seconds=0.03,  # the input lasts through the cuts
        systems__kafka__operation__timeout__ms=REQUEST_TIMEOUT_MS,
        systems__kafka__outage__timeout__ms=OUTAGE_DEADLINE_MS,
    )


def cut_after_progress(config: Settings, source: str, proxy: BlackHoleProxy, seconds: float) -> None:
    """Once the job has checkpointed more input than before, black-hole the broker for ``seconds``."""
    before = checkpointed_messages(config, source)
    wait_until(lambda: checkpointed_messages(config, source) > before, 120, "the job to checkpoint more input")
    with proxy.cut():
        time.sleep(seconds)  # the fault itself: how long the network is gone


def test_a_stateful_job_rides_out_network_blips_and_a_45s_outage_without_a_container_failure(
    tmp_path: Path, kafka_proxy: ProxiedKafka, topic_name: Any, spark: SparkSession
) -> None:
    bootstrap = kafka_proxy.bootstrap_servers
    source, sink, changelog = topic_name("in"), topic_name("out"), topic_name("counts")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    for partition, records in input_records().items():
        produce(bootstrap, source, records, partition=partition)
    config = ride_out_config(tmp_path, kafka_proxy, source, sink, changelog)

    job = RunningJob(config, spark)
    try:
        for seconds in (*BLIPS_S, OUTAGE_S):
            cut_after_progress(config, source, kafka_proxy.proxy, seconds)
        assert checkpointed_messages(config, source) < PARTITIONS * 4 * MESSAGES_PER_KEY, "input left after the cuts"
        wait_until(lambda: every_key_counted(bootstrap, sink), 240, "every key's final count in the output")
    finally:
        kafka_proxy.proxy.heal()
        result = job.stop(timeout=180)

    assert result.outcome == "stopped", result.error
    status = container_status(config)
    epochs = [container.epoch for container in result.containers]
    assert epochs == [1], f"no container failed (no retry); the last restart's cause: {status.get('restart-cause')}"
    assert status.get("attempt") == 1 and not status.get("error"), status
    counts = final_counts(bootstrap, sink)
    assert {key: sent[-1] for key, sent in counts.items()} == expected_counts()
    assert all(sent == list(range(1, MESSAGES_PER_KEY + 1)) for sent in counts.values()), "no count twice, no gap"
    for partition in range(PARTITIONS):
        want = {key: n for key, n in expected_counts().items() if key.startswith(f"p{partition}-")}
        task = TaskName(f"Partition {partition}")
        assert restored_contents(config, task, tmp_path / f"new-host-{partition}") == want
