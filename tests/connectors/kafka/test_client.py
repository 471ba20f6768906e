"""Turning the brokers' answers into offsets: an answer without an offset is a failure to retry, never a
position (librdkafka resolves a timed-out ListOffsets request with offset -1001, which once read as "the
changelog is empty" and checkpointed an empty store)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from millstream.connectors.kafka.client import check_brokers, is_retriable, listed_offset
from millstream.connectors.kafka.errors import KafkaBrokersUnreachableError


@pytest.mark.parametrize("offset", [0, 17, 1 << 40])
def test_a_listed_offset_the_broker_gave_is_returned(offset: int) -> None:
    assert listed_offset("t", 0, SimpleNamespace(offset=offset)) == offset


@pytest.mark.parametrize("offset", [-1001, -1, -2])
def test_a_listed_offset_without_an_answer_is_a_retriable_failure_naming_the_partition(offset: int) -> None:
    with pytest.raises(KafkaException) as raised:
        listed_offset("changelog", 3, SimpleNamespace(offset=offset))
    assert is_retriable(raised.value)
    assert "changelog partition 3" in str(raised.value) and str(offset) in str(raised.value)


def test_a_lookup_by_time_may_answer_that_no_record_is_that_late() -> None:
    assert listed_offset("t", 0, SimpleNamespace(offset=-1), by_timestamp=True) == -1
    with pytest.raises(KafkaException):
        listed_offset("t", 0, SimpleNamespace(offset=-1001), by_timestamp=True)


def test_listing_offsets_without_a_partition_leader_is_retriable() -> None:
    """What librdkafka answers a ListOffsets while the brokers are away; it failed containers unretried."""
    error = KafkaError(KafkaError._NOENT, "Failed to query partition leaders: No leaders found")
    assert is_retriable(KafkaException(error))
    assert not is_retriable(KafkaException(KafkaError(KafkaError._NOENT, "Local: No such entry")))


class FlakyHandle:
    """``list_topics`` that fails ``failures`` times (as librdkafka does while no broker answers), then answers."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def list_topics(self, timeout: float) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "Local: Broker transport failure"))
        return "metadata"


def kafka_settings(servers: str) -> Any:  # the settings check_brokers reads
    settings = SimpleNamespace(startup_timeout_ms=50, outage_timeout_ms=60_000)
    return SimpleNamespace(system="kafka", bootstrap_servers=servers, settings=settings, redact=lambda text: text)


def test_brokers_never_reached_fail_at_the_first_timeout_naming_the_servers_and_the_key() -> None:
    with pytest.raises(KafkaBrokersUnreachableError, match=r"check systems\.kafka\.bootstrap\.servers") as raised:
        check_brokers(FlakyHandle(1), kafka_settings("never-reached:9092"))
    assert "never-reached:9092" in str(raised.value)


def test_brokers_this_process_reached_before_are_waited_for_through_an_outage() -> None:
    """A client created while brokers it reached before are away (a container's admin made at its first
    commit during a network cut) waits for them up to outage.timeout.ms instead of failing the container."""
    kafka = kafka_settings("reached-before:9092")
    assert check_brokers(FlakyHandle(0), kafka) == "metadata"
    handle = FlakyHandle(3)
    assert check_brokers(handle, kafka) == "metadata"
    assert handle.calls == 4


def test_an_outage_longer_than_its_deadline_fails_naming_the_deadline_key() -> None:
    kafka = kafka_settings("reached-then-gone:9092")
    check_brokers(FlakyHandle(0), kafka)
    kafka.settings.outage_timeout_ms = 1
    with pytest.raises(KafkaBrokersUnreachableError, match=r"systems\.kafka\.outage\.timeout\.ms"):
        check_brokers(FlakyHandle(100), kafka)
