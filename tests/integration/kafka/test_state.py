"""A store whose changelog is a Kafka topic, with checkpoints and metadata in Kafka: the changelog is
created compacted with a partition per task, and the state survives a restart (in-process runner)."""

from __future__ import annotations

import uuid

import pytest

from millstream.systems.kafka.factory import KafkaSystemFactory
from tests.helpers import fill, seal
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
