"""``TaskCollector.send_batch``: a batch goes to its producer in one call, serialized column by column; a
batch with a message that fails to serialize or is not bytes is sent message by message, so the one at
fault is named (or dropped) exactly as ``send`` would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.contracts.systems import SystemProducer
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.runtime.collector import SerializationError, TaskCollector
from millstream.serde.registry import SerdeRegistry

JSON_OUT = SystemStream("log", "json-out")
BYTES_OUT = SystemStream("raw", "bytes-out")
CONFIG = Settings(
    {
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
    }
)


class RecordingProducer(SystemProducer):
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def start(self) -> None:
        pass

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        self.calls.append(("send", (envelope.system_stream, envelope.message, envelope.key)))

    def send_batch(
        self, source: str, stream: SystemStream, messages: Sequence[bytes | None], keys: Sequence[bytes | None] | None
    ) -> None:
        self.calls.append(("send_batch", (stream, list(messages), None if keys is None else list(keys))))

    def flush(self, source: str) -> None:
        pass

    def stop(self) -> None:
        pass


class Pool:
    def __init__(self) -> None:
        self.producers: dict[str, RecordingProducer] = {}

    def producer(self, system: str) -> RecordingProducer:
        return self.producers.setdefault(system, RecordingProducer())


def collector(drop_errors: bool = False) -> tuple[TaskCollector, Pool]:
    pool = Pool()
    return TaskCollector("Partition 0", pool, SerdeRegistry.from_config(CONFIG), drop_errors), pool  # type: ignore[arg-type]


def test_a_batch_of_bytes_goes_to_the_producer_in_one_call_as_given():
    sending, pool = collector()
    messages, keys = [b"a", None, b"c"], [b"1", b"2", None]
    sending.send_batch(BYTES_OUT, messages, keys)
    sending.send_batch(BYTES_OUT, [b"d"])
    assert pool.producers["raw"].calls == [
        ("send_batch", (BYTES_OUT, messages, keys)),
        ("send_batch", (BYTES_OUT, [b"d"], None)),
    ]


def test_a_batch_is_serialized_with_the_streams_serdes_keeping_tombstones():
    sending, pool = collector()
    sending.send_batch(JSON_OUT, [{"n": 1}, None], ["k1", "k2"])
    assert pool.producers["log"].calls == [("send_batch", (JSON_OUT, [b'{"n":1}', None], [b"k1", b"k2"]))]


def test_a_message_that_is_not_bytes_on_a_stream_without_serdes_fails_naming_the_stream():
    sending, pool = collector()
    with pytest.raises(SerializationError, match=r"cannot serialize a message for 'raw\.bytes-out'.*no msg\.serde"):
        sending.send_batch(BYTES_OUT, [b"fine", "text"])
    assert pool.producers["raw"].calls == [("send", (BYTES_OUT, b"fine", None))], "what came before was sent"


def test_with_serialization_errors_dropped_only_the_message_at_fault_is_dropped():
    sending, pool = collector(drop_errors=True)
    sending.send_batch(JSON_OUT, [{"n": 1}, {"n": {1, 2}}, {"n": 3}])
    assert [call[0] for call in pool.producers["log"].calls] == ["send", "send"]
    assert [call[1][1] for call in pool.producers["log"].calls] == [b'{"n":1}', b'{"n":3}']
    assert sending.dropped == 1


def test_keys_and_messages_of_different_lengths_are_refused():
    sending, _ = collector()
    with pytest.raises(ValueError, match=r"sent 2 messages to 'raw\.bytes-out' with 1 keys"):
        sending.send_batch(BYTES_OUT, [b"a", b"b"], [b"k"])
