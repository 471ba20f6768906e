"""A store's changelog topic on a real Kafka broker, in process and through the Spark runner: the topic the job creates
gets the store's replicas (``stores.<s>.changelog.replication.factor``, Samza's key) over the system's default, and
replicas the cluster cannot hold fail the job at start naming the key and the broker's reason; the topic never
compacts sooner than ``stores.<s>.changelog.min.compaction.lag.ms`` nor drops tombstones sooner than
``stores.<s>.changelog.delete.retention.ms``, and an existing one that would fails the job at start saying how to fix
it; Samza's ``stores.<s>.changelog.kafka.*`` keys add their topic configs, and one the broker refuses fails the job
naming the key."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession

from millstream.config.settings import Settings
from millstream.connectors.kafka.factory import KafkaSystemFactory
from millstream.errors import MillstreamError
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import InProcessRunner
from tests.integration.kafka.helpers import create_topic
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
def test_on_spark_a_stores_changelog_replicas_override_the_systems_default_and_the_topic_has_samzas_segment_size(
    spark_local: SparkSession, tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    config = replicated_job(tmp_path, bootstrap, changelog, 1)
    prepare_input(config)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert replicas(bootstrap, changelog) == {1}
    assert KafkaSystemFactory().get_admin("kafka", config).topic_config(changelog)["segment.bytes"] == "536870912"


def test_a_changelog_topic_is_created_with_the_stores_compaction_lag_tombstone_retention_and_samzas_segment_size(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    """The restore reverts what followed a checkpoint by replaying the records up to it: the broker's default (0)
    would let it compact them away while the planner takes a checkpoint younger than 0.9 x the lag as safe."""
    changelog = topic_name("changelog")
    config = job(
        tmp_path,
        bootstrap,
        changelog,
        f"lag-{uuid.uuid4().hex[:8]}",
        stores__counts__changelog__min__compaction__lag__ms=3_600_000,
        stores__counts__changelog__delete__retention__ms=172_800_000,
    )
    prepare_input(config)
    run_to_end(config)
    topic = KafkaSystemFactory().get_admin("kafka", config).topic_config(changelog)
    assert topic["min.compaction.lag.ms"] == "3600000"
    assert topic["delete.retention.ms"] == "172800000"
    assert topic["cleanup.policy"] == "compact"
    assert topic["segment.bytes"] == "536870912", "Samza's segment size, not the broker's 1 GiB"


def test_an_existing_changelog_that_compacts_sooner_than_the_stores_lag_fails_the_job_at_start_saying_how_to_fix_it(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    create_topic(bootstrap, changelog, 2, **{"cleanup.policy": "compact"})  # the broker's min.compaction.lag.ms: 0
    config = job(tmp_path, bootstrap, changelog, f"lag-{uuid.uuid4().hex[:8]}")
    prepare_input(config)
    with pytest.raises(MillstreamError) as refused:
        InProcessRunner(config).run(timeout=90)
    message = str(refused.value)
    assert f"changelog 'kafka.{changelog}' of store 'counts'" in message
    assert "stores.counts.changelog.min.compaction.lag.ms=14400000" in message
    assert f"--entity-name {changelog} --add-config min.compaction.lag.ms=14400000" in message
    lowered = config.with_overrides({"stores.counts.changelog.min.compaction.lag.ms": "0"})
    run_to_end(lowered)  # a store that asks no more than the topic gives starts


@pytest.mark.spark
def test_on_spark_an_existing_changelog_that_compacts_sooner_than_the_stores_lag_fails_the_job_at_start(
    spark_local: SparkSession, tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    create_topic(bootstrap, changelog, 2, **{"cleanup.policy": "compact"})
    config = job(tmp_path, bootstrap, changelog, f"lag-{uuid.uuid4().hex[:8]}")
    prepare_input(config)
    with pytest.raises(MillstreamError, match=r"stores\.counts\.changelog\.min\.compaction\.lag\.ms=14400000"):
        result = SparkJobRunner(config, spark=spark_local).run()
        pytest.fail(f"the job ran: {result.outcome}")


def test_an_existing_changelog_that_is_not_compacted_fails_the_job_at_start(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    """A topic the broker trims by time would lose the keys written longest ago, and a restore would miss them."""
    changelog = topic_name("changelog")
    create_topic(bootstrap, changelog, 2, **{"cleanup.policy": "delete", "min.compaction.lag.ms": "14400000"})
    config = job(tmp_path, bootstrap, changelog, f"policy-{uuid.uuid4().hex[:8]}")
    prepare_input(config)
    with pytest.raises(MillstreamError, match=r"cleanup\.policy='delete'; a changelog needs 'compact'"):
        InProcessRunner(config).run(timeout=90)


def test_an_existing_changelog_that_also_deletes_by_time_fails_the_job_at_start(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    """``compact,delete`` compacts and also deletes segments older than ``retention.ms`` (7 days by default): the keys
    written longest ago, which a restore needs."""
    changelog = topic_name("changelog")
    create_topic(bootstrap, changelog, 2, **{"cleanup.policy": "compact,delete", "min.compaction.lag.ms": "14400000"})
    config = job(tmp_path, bootstrap, changelog, f"policy-{uuid.uuid4().hex[:8]}")
    prepare_input(config)
    with pytest.raises(MillstreamError, match=r"cleanup\.policy='compact,delete' and retention\.ms=604800000"):
        InProcessRunner(config).run(timeout=90)


def job_on_a_changelog_keeping_tombstones_an_hour(tmp_path: Path, bootstrap: str, changelog: str) -> Settings:
    """A counting job, its input prepared, whose changelog exists compacted at the store's lag but keeps tombstones
    an hour (the store's ``changelog.delete.retention.ms`` is a day)."""
    settings = {"cleanup.policy": "compact", "min.compaction.lag.ms": "14400000", "delete.retention.ms": "3600000"}
    create_topic(bootstrap, changelog, 2, **settings)
    config = job(tmp_path, bootstrap, changelog, f"tombstones-{uuid.uuid4().hex[:8]}")
    prepare_input(config)
    return config


def test_an_existing_changelog_that_drops_tombstones_sooner_than_the_stores_delete_retention_fails_the_job_at_start(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    """A restore starts from a local checkpoint directory younger than the store's delete retention: a key deleted
    after the directory was made needs its tombstone in the changelog's tail, or it comes back."""
    changelog = topic_name("changelog")
    config = job_on_a_changelog_keeping_tombstones_an_hour(tmp_path, bootstrap, changelog)
    with pytest.raises(MillstreamError) as refused:
        InProcessRunner(config).run(timeout=90)
    message = str(refused.value)
    assert "stores.counts.changelog.delete.retention.ms=86400000" in message
    assert "drops tombstones after delete.retention.ms=3600000" in message
    assert f"--entity-name {changelog} --add-config delete.retention.ms=86400000" in message
    lowered = config.with_overrides({"stores.counts.changelog.delete.retention.ms": "3600000"})
    run_to_end(lowered)


@pytest.mark.spark
def test_on_spark_an_existing_changelog_that_drops_tombstones_sooner_than_the_stores_delete_retention_fails_the_job(
    spark_local: SparkSession, tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    config = job_on_a_changelog_keeping_tombstones_an_hour(tmp_path, bootstrap, changelog)
    with pytest.raises(MillstreamError, match=r"stores\.counts\.changelog\.delete\.retention\.ms=86400000"):
        result = SparkJobRunner(config, spark=spark_local).run()
        pytest.fail(f"the job ran: {result.outcome}")


def kafka_settings_job(tmp_path: Path, bootstrap: str, changelog: str, **settings: str) -> Settings:
    """A counting job whose changelog ``kafka.<changelog>`` gets ``settings`` as ``stores.counts.changelog.kafka.*``."""
    extra = {f"stores__counts__changelog__kafka__{name}": value for name, value in settings.items()}
    return job(tmp_path, bootstrap, changelog, f"topic-configs-{uuid.uuid4().hex[:8]}", **extra)


def test_samzas_changelog_kafka_keys_are_the_topic_configs_of_a_changelog_the_job_creates(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    config = kafka_settings_job(tmp_path, bootstrap, changelog, segment__bytes="1048576", max__message__bytes="2097152")
    prepare_input(config)
    run_to_end(config)
    topic = KafkaSystemFactory().get_admin("kafka", config).topic_config(changelog)
    assert (topic["segment.bytes"], topic["max.message.bytes"]) == ("1048576", "2097152")
    assert topic["cleanup.policy"] == "compact"  # the job's own configs stay under them


def test_an_existing_changelog_is_checked_against_what_a_restore_needs_not_against_the_topic_configs_asked_for_it(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    """``changelog.kafka.*`` applies when the job creates the topic (as in Samza); one that exists keeps its own, and
    it starts as long as it gives a restore what the store's keys say."""
    changelog = topic_name("changelog")
    create_topic(bootstrap, changelog, 2, **{"cleanup.policy": "compact", "min.compaction.lag.ms": "14400000"})
    config = kafka_settings_job(tmp_path, bootstrap, changelog, min__compaction__lag__ms="28800000")
    prepare_input(config)
    run_to_end(config)
    assert (
        KafkaSystemFactory().get_admin("kafka", config).topic_config(changelog)["min.compaction.lag.ms"] == "14400000"
    )


def test_a_changelog_kafka_topic_config_the_broker_refuses_fails_the_job_at_start_naming_the_key(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    config = kafka_settings_job(tmp_path, bootstrap, changelog, no__such__topic__config="1")
    prepare_input(config)
    with pytest.raises(MillstreamError) as refused:
        InProcessRunner(config).run(timeout=90)
    message = str(refused.value)
    assert "stores.counts.changelog.kafka.no.such.topic.config=1" in message
    assert "store 'counts'" in message


@pytest.mark.spark
def test_on_spark_samzas_changelog_kafka_keys_are_the_topic_configs_of_a_changelog_the_job_creates(
    spark_local: SparkSession, tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    changelog = topic_name("changelog")
    config = kafka_settings_job(tmp_path, bootstrap, changelog, segment__bytes="1048576")
    prepare_input(config)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert KafkaSystemFactory().get_admin("kafka", config).topic_config(changelog)["segment.bytes"] == "1048576"
