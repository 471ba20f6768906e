"""Metadata and lifecycle of log streams: offsets, creation, deletion, retention and sealing.

Partition files are kept open in a bounded pool (``open_partitions``, ``systems.<s>.admin.open.partitions.max``)
so the same partitions asked about at every commit are not opened again each time; a pooled file that another
process has meanwhile deleted or re-created is reopened before it answers, so an admin never reports a stale
stream.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from millstream.contracts.systems import (
    StreamOwner,
    StreamSpec,
    SystemAdmin,
    SystemStreamMetadata,
    SystemStreamPartitionMetadata,
    compare_integer_offsets,
)
from millstream.embedded.log.consumer import parse_offset
from millstream.embedded.log.errors import LogSystemError
from millstream.embedded.log.expiry import Reaper
from millstream.embedded.log.layout import LogLayout, StreamInfo
from millstream.embedded.log.metadata import settled_metadata, written_metadata
from millstream.embedded.log.open_partitions import Opener, OpenPartitions
from millstream.embedded.log.storage import LogPartition
from millstream.embedded.log.transactions import wall_clock_ms
from millstream.model import SystemStreamPartition

RETENTION_KEY = "retention.ms"
"""A stream's own retention in its spec config; overrides ``systems.<s>.retention.ms``."""


class LogSystemAdmin(SystemAdmin):
    """``SystemAdmin`` of the embedded log. Offsets are decimal integers, compared as integers. The offsets it
    reports are readers' (up to the stable end), after ending a transaction past its deadline that held it."""

    def __init__(
        self,
        system: str,
        layout: LogLayout,
        *,
        fsync: bool = False,
        retention_ms: int = -1,
        clock: Callable[[], int] = wall_clock_ms,
        max_open_partitions: int = 256,
        opener: Opener | None = None,
    ) -> None:
        """``max_open_partitions`` bounds the partition files kept open between queries (0: none);
        ``opener`` opens one (default: ``LogPartition``)."""
        self.system = system
        self.layout = layout
        self._fsync = fsync
        self._retention_ms = retention_ms
        self._reaper = Reaper(system, layout, fsync=fsync, clock=clock)
        self._open = OpenPartitions(max_open_partitions, opener or self._open_partition)

    @property
    def max_open_partitions(self) -> int:
        """Partition files kept open between queries at most (``systems.<s>.admin.open.partitions.max``)."""
        return self._open.max_open

    def _open_partition(self, path: Path, stream: str, partition: int) -> LogPartition:
        """Without a page cache: the pool keeps up to ``max_open_partitions`` files open for queries of a meta
        row or a batch or two, which the memory map serves as well, and a cache costs each open file as much
        memory again."""
        return LogPartition(path, stream, partition, fsync=self._fsync, page_cache=False)

    def stop(self) -> None:
        self._open.close()
        self._reaper.close()

    @contextmanager
    def _partition(self, stream: str, partition: int, info: StreamInfo | None = None) -> Iterator[LogPartition]:
        """The partition's file from the pool, after checking the partition exists (in ``info``, the stream's
        ``stream.json`` a caller already read for the same call, else read here)."""
        if info is None:
            info = self.layout.require_info(stream)
        if not 0 <= partition < info.partition_count:
            raise LogSystemError(
                f"log stream '{stream}' has partitions 0..{info.partition_count - 1}, not partition {partition}"
            )
        with self._open.partition(self.layout.partition_path(stream, partition), stream, partition) as log:
            yield log

    def partition_counts(self, streams: Iterable[str]) -> dict[str, int]:
        """From each stream's ``stream.json``: no partition file is opened."""
        infos = {stream: self.layout.read_info(stream) for stream in streams}
        return {stream: info.partition_count for stream, info in infos.items() if info is not None}

    def get_system_stream_metadata(self, streams: Iterable[str]) -> dict[str, SystemStreamMetadata]:
        result = {}
        for stream in streams:
            info = self.layout.read_info(stream)
            if info is None:
                continue
            partitions = {}
            for partition in range(info.partition_count):
                with self._partition(stream, partition, info) as log:
                    partitions[partition] = settled_metadata(log, self._reaper)
            result[stream] = SystemStreamMetadata(stream, partitions)
        return result

    def get_ssp_metadata(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """Opens only the given partitions: a task's commit asks about its own changelog partition, so its
        cost does not grow with the stream's partitions (and tasks). A partition whose index cannot be read
        raises, naming it; it is never reported empty."""
        result = {}
        infos: dict[str, StreamInfo | None] = {}
        for ssp in ssps:
            if ssp.stream not in infos:
                infos[ssp.stream] = self.layout.read_info(ssp.stream)
            info = infos[ssp.stream]
            if info is None or not 0 <= ssp.partition < info.partition_count:
                continue
            with self._partition(ssp.stream, ssp.partition, info) as log:
                result[ssp] = settled_metadata(log, self._reaper)
        return result

    def get_written_ssp_metadata(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """``get_ssp_metadata`` with the records of open transactions: under exactly-once a task's checkpoint
        names the end of its changelog with the records the same transaction commits."""
        result = {}
        for ssp in ssps:
            info = self.layout.read_info(ssp.stream)
            if info is None or not 0 <= ssp.partition < info.partition_count:
                continue
            with self._partition(ssp.stream, ssp.partition, info) as log:
                result[ssp] = written_metadata(log.state())
        return result

    def offsets_after(self, offsets: Mapping[SystemStreamPartition, str]) -> dict[SystemStreamPartition, str]:
        return {ssp: str(parse_offset(ssp, offset) + 1) for ssp, offset in offsets.items()}

    def offset_comparator(self, offset1: str, offset2: str) -> int | None:
        return compare_integer_offsets(offset1, offset2)

    def offset_for_timestamp(self, ssp: SystemStreamPartition, timestamp_ms: int) -> str:
        with self._partition(ssp.stream, ssp.partition) as log:
            return str(log.offset_for_timestamp(timestamp_ms))

    origin_offset = "0"

    def create_stream(self, spec: StreamSpec) -> bool:
        """An intermediate stream gets ``retention.ms=-1`` of its own: the system's retention would trim
        records its consumers have not read; they purge it as they checkpoint instead."""
        config = dict(spec.config)
        if spec.intermediate:
            config.setdefault(RETENTION_KEY, "-1")
        return self.layout.create(spec.physical_name, spec.partition_count, config, fsync=self._fsync)

    def validate_stream(self, spec: StreamSpec) -> None:
        """Exists with the expected partitions; an intermediate stream must not expire by time."""
        super().validate_stream(spec)
        if spec.intermediate:
            info = self.layout.require_info(spec.physical_name)
            if (retention := self._retention_of(spec.physical_name, info.config)) >= 0:
                raise LogSystemError(
                    f"log stream '{spec.physical_name}' is an intermediate stream but expires records after "
                    f"{retention} ms: a stage that has not read them yet would lose them; re-create it, or set "
                    f"its retention.ms to -1"
                )

    records_owners = True

    def claim_stream(
        self, stream: str, owner: StreamOwner, *, takeover: bool = False, takeover_key: str = "takeover"
    ) -> StreamOwner | None:
        """The owner is ``owner.json`` in the stream's directory, beside ``stream.json`` and the partitions."""
        return self.layout.claim(stream, owner, takeover_key, takeover=takeover)

    def clear_stream(self, spec: StreamSpec) -> bool:
        self._open.forget_stream(spec.physical_name)
        return self.layout.delete(spec.physical_name)

    def list_streams(self) -> list[str]:
        return self.layout.list_streams()

    def trim(self, ssp: SystemStreamPartition, before_offset: str) -> str:
        """Delete the records of ``ssp`` below ``before_offset``; return the oldest offset afterwards.

        Retention only moves forward, never past the end of the log, and offsets are never reused:
        trimming beyond the end empties the partition and the next record still gets the next offset.
        """
        before = parse_offset(ssp, before_offset)
        with self._partition(ssp.stream, ssp.partition) as log:
            return str(log.trim(before))

    def delete_messages(self, before: Mapping[SystemStreamPartition, str]) -> bool:
        for ssp, offset in before.items():
            self.trim(ssp, offset)
        return True

    def seal_stream(self, stream: str) -> None:
        """Mark every partition of ``stream`` bounded and complete.

        Appends already committed stay readable; later appends fail; a consumer that reads a
        partition to its end receives end-of-stream.
        """
        info = self.layout.require_info(stream)
        for partition in range(info.partition_count):
            with self._partition(stream, partition, info) as log:
                log.seal()

    def trim_expired(self, now_ms: int | None = None) -> dict[SystemStreamPartition, str]:
        """Apply time retention to every stream; return the new oldest offset of each trimmed partition.

        A stream's retention is ``retention.ms`` from its spec config, else the system's
        ``retention.ms``; -1 keeps everything, and changelog streams (``cleanup.policy=compact``)
        are kept unless their own config sets a retention. Records are removed from the front of
        the log up to the first one whose timestamp is within retention, so offsets stay dense.
        """
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        trimmed = {}
        for stream in self.layout.list_streams():
            info = self.layout.read_info(stream)
            if info is None:
                continue
            retention = self._retention_of(stream, info.config)
            if retention < 0:
                continue
            for partition in range(info.partition_count):
                with self._partition(stream, partition, info) as log:
                    before = log.state().oldest
                    oldest = log.trim(log.offset_for_timestamp(now - retention))
                if oldest > before:
                    trimmed[SystemStreamPartition(self.system, stream, partition)] = str(oldest)
        return trimmed

    def _retention_of(self, stream: str, config: Mapping[str, str]) -> int:
        own = config.get(RETENTION_KEY)
        if own is not None:
            try:
                return int(own)
            except ValueError:
                raise LogSystemError(
                    f"log stream '{stream}': '{RETENTION_KEY}' in its stream config must be an integer, got '{own}'"
                ) from None
        if config.get("cleanup.policy") == "compact":
            return -1
        return self._retention_ms
