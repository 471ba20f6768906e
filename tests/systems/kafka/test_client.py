"""Turning the brokers' answers into offsets: an answer without an offset is a failure to retry, never a
position (librdkafka resolves a timed-out ListOffsets request with offset -1001, which once read as "the
changelog is empty" and checkpointed an empty store)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from millstream.systems.kafka.client import is_retriable, listed_offset


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
