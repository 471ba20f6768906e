"""Writes envelopes to log streams, buffered per partition and appended in batches.

A partition's buffer is appended (one transaction) when it reaches
``systems.<s>.producer.batch.size`` records and on ``flush``. A failed append leaves its records in
the buffer, so the error surfaces again at the next ``flush`` instead of the records vanishing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import msgpack

from millstream.errors import StreamNotFoundError
from millstream.model import OutgoingMessageEnvelope
from millstream.systems.base import SystemProducer
from millstream.systems.log.errors import LogSystemError
from millstream.systems.log.layout import LogLayout
from millstream.systems.log.partitioner import Partitioner
from millstream.systems.log.storage import LogPartition, Record

_BYTES_LIKE = (bytes, bytearray, memoryview)


@dataclass
class _StreamWriter:
    stream: str
    partition_count: int
    buffers: list[list[Record]]
    partitions: dict[int, LogPartition] = field(default_factory=dict)


class LogSystemProducer(SystemProducer):
    """``SystemProducer`` of the embedded log; thread-safe.

    Within a partition, records are appended in the order they were sent. ``flush`` returns once
    every record sent before it is committed (see ``storage`` for what survives a crash) and raises
    a ``LogSystemError`` naming the stream and partition when an append failed — for instance
    because the partition is sealed. A missing stream is an error unless
    ``systems.<s>.auto.create.streams`` is true.
    """

    def __init__(
        self,
        system: str,
        layout: LogLayout,
        *,
        batch_size: int = 1000,
        fsync: bool = False,
        auto_create_streams: bool = False,
        default_partitions: int = 1,
    ) -> None:
        self.system = system
        self.layout = layout
        self.batch_size = batch_size
        self._fsync = fsync
        self._auto_create = auto_create_streams
        self._default_partitions = default_partitions
        self._writers: dict[str, _StreamWriter] = {}
        self._partitioner = Partitioner()
        self._lock = threading.Lock()

    def start(self) -> None:
        pass

    def stop(self) -> None:
        """Flush everything, then close the partition files (even when the flush fails)."""
        with self._lock:
            try:
                self._flush_all()
            finally:
                for writer in self._writers.values():
                    for partition in writer.partitions.values():
                        partition.close()
                    writer.partitions.clear()

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        system_stream = envelope.system_stream
        if system_stream.system != self.system:
            raise LogSystemError(f"producer of system '{self.system}' cannot send to '{system_stream}'")
        key = envelope.key
        message = envelope.message
        if not (key is None or isinstance(key, _BYTES_LIKE)) or not (
            message is None or isinstance(message, _BYTES_LIKE)
        ):
            raise LogSystemError(
                f"log stream '{system_stream.stream}': key and message must be bytes (serialized), got "
                f"{type(key).__name__} and {type(message).__name__}"
            )
        timestamp = envelope.timestamp
        timestamp = time.time_ns() // 1_000_000 if timestamp is None else int(timestamp)
        headers = _pack_headers(system_stream.stream, envelope.headers) if envelope.headers else None
        with self._lock:
            writer = self._writers.get(system_stream.stream) or self._open_stream(system_stream.stream)
            partition = self._partitioner.partition(envelope, writer.partition_count)
            buffer = writer.buffers[partition]
            buffer.append((timestamp, key, message, headers))
            if len(buffer) >= self.batch_size:
                self._append(writer, partition)

    def flush(self, source: str) -> None:
        """Commit every buffered record, of every source: flushing more than asked is still correct."""
        with self._lock:
            self._flush_all()

    def _flush_all(self) -> None:
        for writer in self._writers.values():
            for partition, buffer in enumerate(writer.buffers):
                if buffer:
                    self._append(writer, partition)

    def _append(self, writer: _StreamWriter, partition: int) -> None:
        log = writer.partitions.get(partition)
        if log is None:
            path = self.layout.partition_path(writer.stream, partition)
            log = writer.partitions[partition] = LogPartition(path, writer.stream, partition, fsync=self._fsync)
        log.append(writer.buffers[partition])
        writer.buffers[partition] = []

    def _open_stream(self, stream: str) -> _StreamWriter:
        info = self.layout.read_info(stream)
        if info is None:
            if not self._auto_create:
                raise StreamNotFoundError(
                    self.system, stream, f"create it first or set 'systems.{self.system}.auto.create.streams=true'"
                )
            self.layout.create(stream, self._default_partitions, {}, fsync=self._fsync)
            info = self.layout.require_info(stream)
        writer = _StreamWriter(stream, info.partition_count, [[] for _ in range(info.partition_count)])
        self._writers[stream] = writer
        return writer


def _pack_headers(stream: str, headers: dict[str, bytes]) -> bytes:
    try:
        return msgpack.packb(headers)
    except (TypeError, ValueError) as error:
        raise LogSystemError(f"log stream '{stream}': headers must map str to bytes ({error})") from None
