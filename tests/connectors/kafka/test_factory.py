"""The Kafka factory's producer settings (no broker needed: a producer connects only when it starts)."""

from __future__ import annotations

import pytest

from millstream.config.settings import Settings
from millstream.connectors.kafka.config import KafkaClientSettings
from millstream.connectors.kafka.factory import producer_transaction_timeout_ms
from millstream.errors import ConfigError


def settings(**producer: str) -> KafkaClientSettings:
    values = {"systems.kafka.samza.factory": "kafka", "systems.kafka.bootstrap.servers": "localhost:9092"}
    values.update({f"systems.kafka.producer.{key}": value for key, value in producer.items()})
    return KafkaClientSettings(Settings(values), "kafka")


def test_a_configured_transaction_timeout_is_the_one_the_producer_gets() -> None:
    assert producer_transaction_timeout_ms(settings(**{"transaction.timeout.ms": "5000"}), 1000) == 5000
    assert producer_transaction_timeout_ms(settings(), 60_000) == 180_000  # three commit intervals


def test_a_transaction_timeout_within_the_commit_interval_is_refused_naming_both_keys() -> None:
    with pytest.raises(ConfigError, match=r"systems\.kafka\.producer\.transaction\.timeout\.ms.*task\.commit\.ms"):
        producer_transaction_timeout_ms(settings(**{"transaction.timeout.ms": "1000"}), 1000)
