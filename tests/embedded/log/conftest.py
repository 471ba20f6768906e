"""Fixtures for the embedded log: a root directory per test and the factory's admin, consumer, producer."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.embedded.log import consumer as consumer_module
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.segments import Segments
from millstream.embedded.log.storage import LogPartition
from millstream.model import IncomingMessageEnvelope, OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

SYSTEM = "log"


def log_config(root: Path, **settings: object) -> Settings:
    """``systems.log.path=root`` plus ``settings`` given as ``poll__batch__size=10``."""
    values = {f"systems.{SYSTEM}.path": str(root)}
    values.update({f"systems.{SYSTEM}.{key.replace('__', '.')}": str(value) for key, value in settings.items()})
    return Settings(values)


def stored_batches(path: Path) -> list[tuple[int, int, int, bytes]]:
    """``(base_offset, end_offset, count, payload)`` of every batch of the partition file ``path``, read
    from its index and segment files directly, bypassing ``LogPartition``."""
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT base_offset, end_offset, count, segment, position, length, crc FROM batches ORDER BY end_offset"
        ).fetchall()
    connection.close()
    segments = Segments(path, fsync=False)
    try:
        return [(base, end, count, segments.read(*where)) for base, end, count, *where in rows]
    finally:
        segments.close()


def ssp(stream: str, partition: int = 0) -> SystemStreamPartition:
    return SystemStreamPartition(SYSTEM, stream, partition)


def envelope(stream: str, value: bytes | None, key: bytes | None = None, **kwargs: Any) -> OutgoingMessageEnvelope:
    return OutgoingMessageEnvelope(SystemStream(SYSTEM, stream), value, key, **kwargs)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "log"


@pytest.fixture
def config(root: Path) -> Settings:
    return log_config(root)


@pytest.fixture
def admin(config: Settings) -> Iterator[LogSystemAdmin]:
    admin = LogSystemFactory().get_admin(SYSTEM, config)
    admin.start()
    yield admin
    admin.stop()


@pytest.fixture
def producer(config: Settings) -> Iterator[LogSystemProducer]:
    producer = LogSystemFactory().get_producer(SYSTEM, config)
    producer.start()
    yield producer
    producer.stop()


@pytest.fixture
def consumer(config: Settings) -> Iterator[LogSystemConsumer]:
    consumer = LogSystemFactory().get_consumer(SYSTEM, config)
    yield consumer
    consumer.stop()


def create(admin: LogSystemAdmin, stream: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    assert admin.create_stream(StreamSpec(SYSTEM, stream, partitions, config or {}))


def recreate(admin: LogSystemAdmin, root: Path, stream: str, partitions: int = 1) -> None:
    """Delete ``stream`` and create it again, as another process would: ``admin`` is stopped first (it may hold
    the old files open) and a fresh admin creates the new files, which may get the old ones' inode numbers."""
    admin.stop()
    shutil.rmtree(root / stream)
    fresh = LogSystemFactory().get_admin(SYSTEM, log_config(root))
    fresh.start()
    try:
        create(fresh, stream, partitions)
    finally:
        fresh.stop()


def write(producer: LogSystemProducer, stream: str, values: list[bytes], partition: int = 0, **kwargs: Any) -> None:
    for value in values:
        producer.send("test", envelope(stream, value, partition=partition, **kwargs))
    producer.flush("test")


def read_all(consumer: LogSystemConsumer, ssps: set[SystemStreamPartition]) -> list[IncomingMessageEnvelope]:
    """Poll until a poll returns nothing (the consumer must be started)."""
    out: list[IncomingMessageEnvelope] = []
    while batches := consumer.poll(ssps, 0):
        for batch in batches.values():
            out.extend(batch)
    return out


class Opened:
    """The partition files consumers opened (every attempt, in order), and those of them still open."""

    def __init__(self) -> None:
        self.order: list[tuple[str, int]] = []
        self.live: set[tuple[str, int]] = set()


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> Opened:
    """Every partition file a consumer opens and closes, through the consumer module's ``LogPartition``."""
    opened = Opened()

    class Counted(LogPartition):
        __slots__ = ()

        def __init__(self, path: Path, stream: str, partition: int, **kwargs: object) -> None:
            opened.order.append((stream, partition))
            super().__init__(path, stream, partition, **kwargs)  # type: ignore[arg-type]
            opened.live.add((stream, partition))

        def close(self) -> None:
            opened.live.discard((self.stream, self.partition))
            super().close()

    monkeypatch.setattr(consumer_module, "LogPartition", Counted)
    return opened
