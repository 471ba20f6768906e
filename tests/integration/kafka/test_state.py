"""A store whose changelog is a Kafka topic, with checkpoints and metadata in Kafka: the changelog is
created compacted with a partition per task, and the state survives a restart (in-process runner); the
tasks of one container share its checkpoint producer and commit at once (in-process and on Spark)."""

from __future__ import annotations

import uuid

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.connectors.kafka.factory import KafkaSystemFactory
from millstream.spark.run.runner import SparkJobRunner
from millstream.spark.run.session import build_session
from tests.helpers import create_stream, fill, seal
from tests.storage.harness import state_config
from tests.storage.test_stateful_jobs import TASK_CLASS, final_stores, prepare, reference, run_to_end, run_until_read

pytestmark = pytest.mark.integration


def test_a_store_changelog_on_kafka_restores_the_state_after_a_restart(tmp_path, bootstrap, topic_name):
    changelog = topic_name("changelog")
    config = state_config(
        tmp_path,
        "changelog",
        task=TASK_CLASS,
        task__commit__ms=50,
        job__container__count=2,
        job__name=f"state-{uuid.uuid4().hex[:8]}",
        stores__counts__changelog=f"kafka.{changelog}",
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
        task__checkpoint__factory="kafka",
        metadata__store__factory="kafka",
    )
    written = prepare(config)
    run_until_read(config, 120)
    admin = KafkaSystemFactory().get_admin("kafka", config)
    assert admin.get_system_stream_metadata([changelog])[changelog].partition_count == 2
    assert admin.topic_config(changelog)["cleanup.policy"] == "compact"

    written |= fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    run_to_end(config)
    assert final_stores(config) == reference(written) == {"k0": 100, "k1": 100}
    assert not list(tmp_path.rglob("metadata.db")), "metadata and checkpoints live in Kafka only"


def four_stateful_tasks_in_one_container(tmp_path, bootstrap) -> tuple[Settings, set[tuple[int, int]]]:
    """Four tasks sharing one container's checkpoint producer, their commits finishing on its thread pool."""
    config = state_config(
        tmp_path,
        "blobstore",
        task=TASK_CLASS,
        task__commit__ms=20,
        job__container__count=1,
        job__name=f"state-{uuid.uuid4().hex[:8]}",
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
        task__checkpoint__factory="kafka",
        metadata__store__factory="kafka",
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 1)
    written = fill(config, "in", 4, 400)
    seal(config, "in")
    return config, written


def assert_every_task_checkpointed_its_end(config: Settings) -> None:
    checkpoints = checkpoint_manager(config, metadata_store(config)).read_all()
    ends = {ssp.partition: offset for checkpoint in checkpoints.values() for ssp, offset in checkpoint.offsets.items()}
    assert ends == {partition: "399" for partition in range(4)}


def test_four_stateful_tasks_of_one_container_commit_to_the_kafka_checkpoint_topic_at_once(tmp_path, bootstrap):
    config, written = four_stateful_tasks_in_one_container(tmp_path, bootstrap)
    run_to_end(config)
    assert final_stores(config) == reference(written)
    assert_every_task_checkpointed_its_end(config)


@pytest.mark.spark
def test_four_stateful_tasks_of_one_container_commit_to_kafka_at_once_through_the_spark_runner(tmp_path, bootstrap):
    config, written = four_stateful_tasks_in_one_container(tmp_path, bootstrap)
    result = SparkJobRunner(config, spark=build_session(config, master="local[4]")).run()
    assert result.outcome == "finished", result.error
    assert final_stores(config) == reference(written)
    assert_every_task_checkpointed_its_end(config)
