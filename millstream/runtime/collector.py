"""Output of a container: producers per system, and the per-task collector that serializes into them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any

from millstream.contracts.systems import all_bytes_or_none, all_none
from millstream.errors import MillstreamError
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.serde.base import SerdeError
from millstream.serde.registry import SerdeRegistry
from millstream.systems.producers import ProducerPool

log = logging.getLogger(__name__)


class SerializationError(MillstreamError):
    """An output message could not be serialized; names the stream and the task."""


Encoder = Callable[[Any], bytes]
_Send = Callable[[str, OutgoingMessageEnvelope], None]
_SendBatch = Callable[[str, SystemStream, Sequence[Any], Sequence[Any] | None], None]
_Codec = tuple[Encoder | None, Encoder | None, _Send, _SendBatch]


class TaskCollector:
    """The ``MessageCollector`` a task sends through: serializes with the output stream's serdes.

    A message that is bytes already (or a stream without serdes) goes to its producer as the task built
    it: producers never modify what they are given, so nothing is copied. Only a message the
    serdes encode is re-wrapped, in a new envelope with the bytes. The stream sent to last is
    remembered by identity: a task usually sends to one stream object, which then costs no lookup.
    """

    __slots__ = ("_codecs", "_drop_errors", "_last", "_pool", "_serdes", "dropped", "source")

    def __init__(self, source: str, pool: ProducerPool, serdes: SerdeRegistry, drop_errors: bool) -> None:
        self.source = source
        self._pool = pool
        self._serdes = serdes
        self._drop_errors = drop_errors
        self._codecs: dict[SystemStream, _Codec] = {}
        self._last: tuple[SystemStream | None, _Codec] = (None, (None, None, _unset_send, _unset_send_batch))
        """The stream sent to last and its codec, as one reference."""
        self.dropped = 0

    def send(self, envelope: OutgoingMessageEnvelope) -> None:
        stream = envelope.system_stream
        last_stream, codec = self._last
        if stream is not last_stream:
            codec = self._codecs.get(stream) or self._codec(stream)
            self._last = (stream, codec)
        key_encode, msg_encode, send, _ = codec
        if key_encode is None and msg_encode is None:
            message, key, partition_key = envelope.message, envelope.key, envelope.partition_key
            if (
                (message.__class__ is bytes or message is None)
                and (key is None or key.__class__ is bytes)
                and (partition_key is None or partition_key.__class__ is bytes)
            ):
                send(self.source, envelope)
                return
        self._send_encoded(envelope, key_encode, msg_encode, send)

    def flush(self) -> None:
        """Make everything this task sent durable now, without a commit (``ProducerPool.flush`` of its source):
        what a task that must order a write after its earlier output asks for (aggregate-mode control messages),
        rather than a commit, whose snapshot and checkpoint it does not need."""
        self._pool.flush(self.source)

    def send_batch(self, stream: SystemStream, messages: Sequence[Any], keys: Sequence[Any] | None = None) -> None:
        """Serialize the batch column by column and hand it to the producer in one call. Anything out of
        the ordinary (a serde that fails, a value that is not bytes on a stream without serdes) takes
        ``send`` message by message instead, so it fails or is dropped exactly as it would there."""
        if keys is not None and len(keys) != len(messages):
            raise ValueError(f"task '{self.source}' sent {len(messages)} messages to '{stream}' with {len(keys)} keys")
        if keys is not None and all_none(keys):
            keys = None  # no key to encode, check or hash: the producer's keyless path
        last_stream, codec = self._last
        if stream is not last_stream:
            codec = self._codecs.get(stream) or self._codec(stream)
            self._last = (stream, codec)
        key_encode, msg_encode, _, send_batch = codec
        encoded = _encode_batch(messages, keys, msg_encode, key_encode)
        if encoded is None:
            for message, key in zip(messages, repeat(None) if keys is None else keys, strict=False):
                self.send(OutgoingMessageEnvelope(stream, message, key))
            return
        send_batch(self.source, stream, *encoded)

    def _send_encoded(
        self, envelope: OutgoingMessageEnvelope, key_encode: Encoder | None, msg_encode: Encoder | None, send: _Send
    ) -> None:
        stream = envelope.system_stream
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
        send(
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

    def _codec(self, stream: SystemStream) -> _Codec:
        key_serde = self._serdes.key_serde(stream)
        msg_serde = self._serdes.msg_serde(stream)
        producer = self._pool.producer(stream.system)
        codec = (
            key_serde.to_bytes if key_serde else None,
            msg_serde.to_bytes if msg_serde else None,
            producer.send,
            producer.send_batch,
        )
        self._codecs[stream] = codec
        return codec


def _encode_batch(
    messages: Sequence[Any], keys: Sequence[Any] | None, msg_encode: Encoder | None, key_encode: Encoder | None
) -> tuple[Sequence[Any], Sequence[Any] | None] | None:
    """The batch's messages and keys as bytes (``None`` stays ``None``), or None when one of them fails to
    serialize or is not bytes: the caller then sends message by message, which names the one at fault."""
    try:
        values = messages if msg_encode is None else [None if m is None else msg_encode(m) for m in messages]
        if key_encode is not None and keys is not None:
            keys = [None if k is None else key_encode(k) for k in keys]
    except SerdeError:
        return None
    if not all_bytes_or_none(values) or (keys is not None and not all_bytes_or_none(keys)):
        return None
    return values, keys


def _unset_send(source: str, envelope: OutgoingMessageEnvelope) -> None:
    raise AssertionError("no stream was sent to yet")  # never called: no envelope's stream is None


def _unset_send_batch(source: str, stream: SystemStream, messages: Sequence[Any], keys: Sequence[Any] | None) -> None:
    raise AssertionError("no stream was sent to yet")  # never called: no stream is None


def _require_bytes(key: Any, message: Any) -> None:
    for name, serde_key, value in (("key", "key.serde", key), ("message", "msg.serde", message)):
        if value is not None and not isinstance(value, bytes):
            raise SerdeError(
                f"the {name} is a {type(value).__name__} but the stream has no {serde_key} "
                f"(configure systems.<s>.samza.{serde_key})"
            )
