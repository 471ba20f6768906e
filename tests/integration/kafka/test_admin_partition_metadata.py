"""A task's commit asks the broker for its own partition's offsets only: once the admin has seen a topic's
partition count it does not read the metadata of every partition again (a changelog of a thousand partitions
made each of a thousand commits read all of them), a topic it deleted is not taken to exist any more, and it
keeps none of the partitions it reads about in its client."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import pytest

from millstream.connectors.kafka.admin import KafkaSystemAdmin
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.factory import KafkaSystemFactory
from millstream.contracts.systems import StreamSpec
from millstream.model import SystemStreamPartition
from tests.helpers import wait_until
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


def test_the_admin_keeps_no_partitions_of_the_topics_it_reads_or_creates(bootstrap, topic_name, monkeypatch) -> None:
    """To librdkafka an admin client is a producer: every partition its client keeps (a topic read with
    ``list_topics(topic=...)``) is walked by its broker thread each time it serves a request, and a container's
    admin answers every commit's offset questions, so a 1,000-partition changelog cost tasks x requests. The
    admin reads topics with DescribeTopics, which keeps none; librdkafka's statistics count what it keeps."""
    read, created = topic_name("read"), topic_name("created")
    create_topic(bootstrap, read, 50)
    statistics: list[dict[str, Any]] = []
    admin_settings = KafkaClientSettings.admin

    def with_statistics(self: KafkaClientSettings, **overrides: Any) -> dict[str, Any]:
        settings = admin_settings(self, **overrides)
        settings.update({"statistics.interval.ms": 50, "stats_cb": lambda raw: statistics.append(orjson.loads(raw))})
        return settings

    monkeypatch.setattr(KafkaClientSettings, "admin", with_statistics)
    admin = KafkaSystemFactory().get_admin(SYSTEM, kafka_config(bootstrap))
    assert isinstance(admin, KafkaSystemAdmin)
    admin.start()
    ssp = SystemStreamPartition(SYSTEM, read, 7)
    assert admin.partition_counts([read, "no-such-topic"]) == {read: 50}
    assert ssp in admin.get_ssp_metadata([ssp])
    assert admin.create_stream(StreamSpec(SYSTEM, created, 4)) is True
    client = admin._client()
    statistics.clear()
    wait_until(lambda: client.poll(0.05) is not None and statistics, 10, "the admin reported no statistics")
    assert {name: len(topic["partitions"]) for name, topic in statistics[-1]["topics"].items()} == {}
