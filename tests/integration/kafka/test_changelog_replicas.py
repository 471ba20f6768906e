"""``stores.<s>.changelog.replication.factor`` (Samza's key) on a real Kafka broker, in process and through the Spark
runner: the changelog topic the job creates gets the store's replicas over the system's default, and replicas the
cluster cannot hold fail the job at start naming the key and the broker's reason."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from millstream.config.settings import Settings
from millstream.errors import MillstreamError
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import InProcessRunner
from tests.integration.kafka.test_changelog_ownership import job
from tests.storage.backends.changelog.test_ownership import prepare_input, run_to_end

pytestmark = pytest.mark.integration


def brokers(bootstrap: str) -> int:
    return len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).brokers)


def replicas(bootstrap: str, topic: str) -> set[int]:
    """How many replicas each partition of ``topic`` has."""
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30).topics[topic]
    return {len(partition.replicas) for partition in metadata.partitions.values()}


def replicated_job(tmp_path: Path, bootstrap: str, changelog: str, store_replicas: int, **extra: Any) -> Settings:
    """A counting job whose changelog is ``kafka.<changelog>``, the system's default replicas more than the cluster's
    brokers (so a topic created with them fails), the store's own ``store_replicas``."""
    return job(
        tmp_path,
        bootstrap,
        changelog,
        f"replicas-{uuid.uuid4().hex[:8]}",
        systems__kafka__default__replication__factor=brokers(bootstrap) + 1,
        stores__counts__changelog__replication__factor=store_replicas,
        **extra,
    )


def test_a_stores_changelog_replicas_override_the_systems_default_when_the_job_creates_the_topic(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    config = replicated_job(tmp_path, bootstrap, changelog, 1)
    prepare_input(config)
    run_to_end(config)
    assert replicas(bootstrap, changelog) == {1}


def test_more_changelog_replicas_than_brokers_fail_the_job_at_start_naming_the_key(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    config = replicated_job(tmp_path, bootstrap, changelog, brokers(bootstrap) + 1)
    prepare_input(config)
    with pytest.raises(MillstreamError) as refused:
        InProcessRunner(config).run(timeout=90)
    message = str(refused.value)
    assert f"stores.counts.changelog.replication.factor={brokers(bootstrap) + 1}" in message
    assert "store 'counts'" in message and changelog in message


@pytest.mark.spark
def test_on_spark_a_stores_changelog_replicas_override_the_systems_default(
    spark_local: SparkSession, tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    config = replicated_job(tmp_path, bootstrap, changelog, 1)
    prepare_input(config)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert replicas(bootstrap, changelog) == {1}
