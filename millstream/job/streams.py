"""``job.streams``: create, inspect, write, read, seal and delete the streams of any system a job's config
names, with the stream's configured serdes.

Every call uses the system's admin of the job's driver services (opened for the call and closed before it
returns, unless the ``Job`` is used as a context manager: then once for the block), so a ``Job`` used call by
call holds no connection between calls. Producers and consumers are opened per call.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from millstream.config.settings import Settings
from millstream.config.views import parse_stream
from millstream.contracts.systems import StreamSpec, SystemAdmin, SystemStreamMetadata
from millstream.coordinator.services import ServiceScope
from millstream.model import IncomingMessageEnvelope, SystemStream
from millstream.serde.base import Serde
from millstream.serde.registry import SerdeRegistry
from millstream.testing import iter_stream, read_stream, write_stream

T = TypeVar("T")

StreamName = str | SystemStream
"""``"system.stream"`` (a bare name means the embedded log, ``log``) or a ``SystemStream``."""


def stream_of(name: StreamName) -> SystemStream:
    """The ``SystemStream`` a name denotes; a ``ConfigError`` names a malformed one."""
    return name if isinstance(name, SystemStream) else parse_stream(name, "stream")


class Streams:
    """The streams of the systems a job's config declares (``job.streams``)."""

    def __init__(self, config: Settings, scope: ServiceScope | None = None) -> None:
        self._config = config
        self._scope = scope or ServiceScope(config)

    def _with_admin(self, system: str, action: Callable[[SystemAdmin], T]) -> T:
        with self._scope.use() as services:
            return action(services.admin(system))

    def create(self, stream: StreamName, partitions: int = 1, settings: Mapping[str, str] | None = None) -> bool:
        """Create ``stream`` with ``partitions`` partitions and system ``settings``; False (no change) if it exists."""
        target = stream_of(stream)
        spec = StreamSpec(target.system, target.stream, partitions, dict(settings or {}))
        return self._with_admin(target.system, lambda admin: admin.create_stream(spec))

    def list(self, system: str = "log") -> builtins.list[str]:
        """The names of ``system``'s streams, sorted."""
        return sorted(self._with_admin(system, lambda admin: admin.list_streams()))

    def describe(self, stream: StreamName) -> SystemStreamMetadata | None:
        """Partitions of ``stream`` with their oldest, newest and upcoming offsets; None if it does not exist."""
        target = stream_of(stream)
        return self._with_admin(
            target.system, lambda admin: admin.get_system_stream_metadata([target.stream]).get(target.stream)
        )

    def delete(self, stream: StreamName) -> bool:
        """Delete ``stream`` and its data; False if there was no such stream."""
        target = stream_of(stream)
        return self._with_admin(
            target.system, lambda admin: admin.clear_stream(StreamSpec(target.system, target.stream))
        )

    def seal(self, stream: StreamName) -> None:
        """Mark a log stream complete: jobs reading it reach end-of-stream at its end."""
        target = stream_of(stream)
        self._with_admin(target.system, lambda admin: admin.seal_stream(target.stream))

    def write(self, stream: StreamName, messages: Iterable[tuple[Any, Any]], *, partition: int | None = None) -> int:
        """Append ``(key, value)`` pairs, serialized with the stream's serdes (to ``partition`` when given,
        else as the system partitions by key); returns how many were written, all flushed."""
        return write_stream(self._config, stream_of(stream), messages, partition=partition)

    def read(self, stream: StreamName, *, idle_timeout: float = 2.0) -> dict[int, builtins.list[tuple[Any, Any]]]:
        """Every retained ``(key, value)`` per partition, decoded with the stream's serdes. A partition is read
        up to the newest offset seen at the start, its end-of-stream, or ``idle_timeout`` seconds without data."""
        return read_stream(self._config, stream_of(stream), idle_timeout=idle_timeout)

    def records(
        self, stream: StreamName, *, idle_timeout: float = 2.0
    ) -> Iterator[tuple[int, builtins.list[IncomingMessageEnvelope]]]:
        """Every retained record as it arrives, undecoded: ``(partition, envelopes)``, each partition once
        first with an empty list. Raises ``StreamNotFoundError`` when the stream does not exist."""
        return iter_stream(self._config, stream_of(stream), idle_timeout=idle_timeout)

    def serdes(self, stream: StreamName) -> tuple[Serde | None, Serde | None]:
        """The ``(key, message)`` serdes the config gives ``stream``; None where it stores bytes as they are."""
        target = stream_of(stream)
        registry = SerdeRegistry.from_config(self._config)
        return registry.key_serde(target), registry.msg_serde(target)
