"""A task's commit asks the broker for its own partition's offsets only: once the admin has seen a topic's
partition count it does not read the metadata of every partition again (a changelog of a thousand partitions
made each of a thousand commits read all of them), and a topic it deleted is not taken to exist any more."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kafka.factory import KafkaSystemFactory
from millstream.contracts.systems import StreamSpec
from millstream.model import SystemStreamPartition
from tests.integration.kafka.helpers import SYSTEM, create_topic, kafka_config, produce

pytestmark = pytest.mark.integration


def test_offsets_of_known_partitions_need_no_topic_metadata_again(bootstrap, topic_name, monkeypatch) -> None:
    topic = topic_name("changelog")
    create_topic(bootstrap, topic, 8)
    produce(bootstrap, topic, [(b"k", b"v")], partition=3)
    admin = KafkaSystemFactory().get_admin(SYSTEM, kafka_config(bootstrap))
    assert isinstance(admin, KafkaSystemAdmin)
    admin.start()
    reads: list[set[str]] = []
    counts = admin.partition_counts

    def counting(topics: Iterable[str]) -> dict[str, int]:
        reads.append(set(topics))
        return counts(topics)

    monkeypatch.setattr(admin, "partition_counts", counting)
    mine = SystemStreamPartition(SYSTEM, topic, 3)
    assert admin.get_ssp_metadata([mine])[mine].newest_offset == "0"
    assert admin.get_ssp_metadata([mine])[mine].newest_offset == "0"
    assert admin.get_written_ssp_metadata([SystemStreamPartition(SYSTEM, topic, 7)])
    assert reads == [{topic}], "the topic's metadata was read once, at the first question"
    assert admin.get_ssp_metadata([SystemStreamPartition(SYSTEM, topic, 8)]) == {}, "beyond the topic: asks again"
    assert reads == [{topic}, {topic}]


def test_a_topic_the_admin_deleted_is_not_taken_to_exist(bootstrap, topic_name) -> None:
    topic = topic_name("cleared")
    create_topic(bootstrap, topic, 2)
    admin = KafkaSystemFactory().get_admin(SYSTEM, kafka_config(bootstrap))
    admin.start()
    ssp = SystemStreamPartition(SYSTEM, topic, 1)
    assert ssp in admin.get_ssp_metadata([ssp])
    assert admin.clear_stream(StreamSpec(SYSTEM, topic, 2))
    assert admin.get_ssp_metadata([ssp]) == {}
