"""End-of-version markers: how a stream carrying a bounded dataset says a version is complete.

A marker is an ordinary message with the header ``millstream.adstore.end-of-version`` (its value names
the version) written to *every* partition of the stream after the version's last record, so each
partition tells its readers where the version ends. Markers travel through any system with headers
(the log, Kafka); they are never stored as data.
"""

from __future__ import annotations

from typing import Protocol

from millstream.config.settings import Settings
from millstream.contracts.systems import SystemAdmin, SystemFactory
from millstream.errors import StreamNotFoundError
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream

END_OF_VERSION_HEADER = "millstream.adstore.end-of-version"


def end_of_version_label(envelope: IncomingMessageEnvelope) -> str | None:
    """The version an envelope ends, or None for a data message."""
    headers = envelope.headers
    if not headers:
        return None
    label = headers.get(END_OF_VERSION_HEADER)
    if label is None:
        return None
    return label.decode("utf-8", "replace") if isinstance(label, (bytes, bytearray)) else str(label)


def end_of_version(stream: SystemStream, label: str, partition: int) -> OutgoingMessageEnvelope:
    return OutgoingMessageEnvelope(
        stream, b"", None, partition=partition, headers={END_OF_VERSION_HEADER: label.encode("utf-8")}
    )


class SystemSource(Protocol):
    """Where the marker writer gets a system's admin and factory: the driver's services."""

    def admin(self, system: str) -> SystemAdmin: ...

    def factory(self, system: str) -> SystemFactory: ...


def write_end_of_version(systems: SystemSource, config: Settings, stream: SystemStream, label: str) -> int:
    """Append an end-of-version marker to every partition of ``stream``; returns the partition count."""
    metadata = systems.admin(stream.system).get_system_stream_metadata([stream.stream])
    if stream.stream not in metadata:
        raise StreamNotFoundError(stream.system, stream.stream, "cannot mark the end of a version")
    partitions = sorted(metadata[stream.stream].partitions)
    producer = systems.factory(stream.system).get_producer(stream.system, config)
    producer.start()
    try:
        for partition in partitions:
            producer.send("adstore", end_of_version(stream, label, partition))
        producer.flush("adstore")
    finally:
        producer.stop()
    return len(partitions)
