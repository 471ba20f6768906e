"""Output of a container: producers per system, and the per-task collector that serializes into them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from millstream.errors import MillstreamError
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.serde.base import SerdeError
from millstream.serde.registry import SerdeRegistry
from millstream.systems.base import SystemProducer
from millstream.systems.producers import ProducerPool

log = logging.getLogger(__name__)


class SerializationError(MillstreamError):
    """An output message could not be serialized; names the stream and the task."""


Encoder = Callable[[Any], bytes]


class TaskCollector:
    """The ``MessageCollector`` a task sends through: serializes with the output stream's serdes."""

    __slots__ = ("_codecs", "_drop_errors", "_pool", "_serdes", "dropped", "sent", "source")

    def __init__(self, source: str, pool: ProducerPool, serdes: SerdeRegistry, drop_errors: bool) -> None:
        self.source = source
        self._pool = pool
        self._serdes = serdes
        self._drop_errors = drop_errors
        self._codecs: dict[SystemStream, tuple[Encoder | None, Encoder | None, SystemProducer]] = {}
        self.sent = 0
        self.dropped = 0

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        stream = envelope.system_stream
        codec = self._codecs.get(stream)
        if codec is None:
            codec = self._codec(stream)
        key_encode, msg_encode, producer = codec
        if key_encode is None and msg_encode is None and _all_bytes(envelope):
            producer.send(self.source, envelope)  # producers never modify what they are given
            self.sent += 1
            return
        try:
            key = envelope.key
            message = envelope.message
            partition_key = envelope.partition_key
            if key_encode is not None:
                key = None if key is None else key_encode(key)
                partition_key = None if partition_key is None else key_encode(partition_key)
            elif partition_key is not None and not isinstance(partition_key, bytes):
                partition_key = str(partition_key).encode()
            if msg_encode is not None and message is not None:
                message = msg_encode(message)
            _require_bytes(key, message)
        except SerdeError as error:
            if self._drop_errors:
                self.dropped += 1
                log.warning("%s: dropped a message to %s that failed to serialize: %s", self.source, stream, error)
                return
            raise SerializationError(
                f"task '{self.source}' cannot serialize a message for '{stream}': {error}"
            ) from None
        producer.send(
            self.source,
            OutgoingMessageEnvelope(
                stream,
                message,
                key,
                partition_key,
                partition=envelope.partition,
                timestamp=envelope.timestamp,
                headers=envelope.headers,
            ),
        )
        self.sent += 1

    def _codec(self, stream: SystemStream) -> tuple[Encoder | None, Encoder | None, SystemProducer]:
        key_serde = self._serdes.key_serde(stream)
        msg_serde = self._serdes.msg_serde(stream)
        codec = (
            key_serde.to_bytes if key_serde else None,
            msg_serde.to_bytes if msg_serde else None,
            self._pool.producer(stream.system),
        )
        self._codecs[stream] = codec
        return codec


def _all_bytes(envelope: OutgoingMessageEnvelope) -> bool:
    message, key, partition_key = envelope.message, envelope.key, envelope.partition_key
    return (
        (type(message) is bytes or message is None)
        and (key is None or type(key) is bytes)
        and (partition_key is None or type(partition_key) is bytes)
    )


def _require_bytes(key: Any, message: Any) -> None:
    for name, serde_key, value in (("key", "key.serde", key), ("message", "msg.serde", message)):
        if value is not None and not isinstance(value, bytes):
            raise SerdeError(
                f"the {name} is a {type(value).__name__} but the stream has no {serde_key} "
                f"(configure systems.<s>.samza.{serde_key})"
            )
