"""The input every contender reads and the topics around it.

``--messages`` JSON messages of about 100 bytes, message ``i`` keyed ``key-<i % keys>`` (Kafka key and a
field of the value), key ``k`` in partition ``k % partitions``: a key lives in one partition, as every
framework's keyed state expects, and each partition holds the same number of messages when
``keys`` divides ``messages`` and ``partitions`` divides ``keys``.
Output topics record the broker's append time, so a contender's rate is read off its output the same
way for everyone, whatever the contender reports about itself.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from benchmarks.peers.verify import key_bytes
from tests.integration.kafka.helpers import create_topic

MESSAGE_BYTES = 100


def message_value(index: int, keys: int) -> bytes:
    """A JSON object of exactly ``MESSAGE_BYTES`` bytes (padded) naming its key and sequence number."""
    body = {"key": key_bytes(index % keys).decode(), "seq": index, "amount": index % 997, "pad": ""}
    raw = json.dumps(body, separators=(",", ":"))
    body["pad"] = "x" * max(0, MESSAGE_BYTES - len(raw))
    return json.dumps(body, separators=(",", ":")).encode()


def delete_topics(bootstrap: str, prefix: str) -> None:
    """Delete every topic whose name starts with ``prefix`` (outputs, changelogs, internal topics)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix)]
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result(60)


def write_input(bootstrap: str, topic: str, partitions: int, messages: int, keys: int) -> float:
    """Write the workload's input; messages/s of the writing."""
    create_topic(bootstrap, topic, partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    started = time.perf_counter()
    for index in range(messages):
        while True:
            try:
                key = index % keys
                producer.produce(topic, message_value(index, keys), key_bytes(key), key % partitions)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{topic}: messages still unsent after 120 s")
    return messages / (time.perf_counter() - started)
