"""``spark.readStream.format("millstream")``: a Structured Streaming source over millstream's systems that
honours millstream Startpoints.

::

    spark.readStream.format("millstream").option("config", "job.yaml").option("stream", "log.page-views") \\
        .option("job", "page-view-audit").load()

Spark's offset for the source is, per partition, the next offset to read and the newest offset present (a
micro-batch reads up to it, inclusive: not every system's consumer can tell when it has passed an offset that
holds no record yet), plus the last startpoint applied to each partition (``{"offsets": {"0": "17"},
"newest": {"0": "16"}, "startpoints": {"0": {"created": 1700000000000, "offset": "5"}}}``).
Rows are those of the batch format ``millstream`` (same columns, serdes and ``raw``), read by each system's
own consumer, one Spark partition per stream partition. A Kinesis stream, whose shards come and go, is
planned by :mod:`millstream.spark.sources.shard_stream` instead, with shards in Spark's offset.

**Startpoints.** The source reads the startpoints of its stream's partitions from the metadata store of the
job named by option ``job`` (the config's own job when absent): ``millstream startpoint set job.yaml --stream
log.page-views --offset 5 --set job.name=page-view-audit`` moves the query without touching its checkpoint.
When a micro-batch is planned (``latestOffset``), a startpoint not yet applied is resolved by the stream's
admin and recorded in the batch's end offset, which Spark writes to its offset log before the batch runs; the
batch then reads that partition from the startpoint instead of from where the previous batch ended. Because
the override lives in Spark's offset log, a batch re-run after a crash reads the same range. The startpoint is
deleted once the batch that applied it has finished: at the next planning (Spark plans a batch only after the
previous one committed) or at ``commit``, whichever comes first, so a query stopped right after that batch,
restarted from its checkpoint, does not apply it again. A running query jumps at its next micro-batch; a
stopped one when it restarts.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.contracts.startpoints import Startpoint, StartpointOldest, StartpointSpecific, StartpointUpcoming
from millstream.contracts.systems import SystemAdmin
from millstream.model import SystemStreamPartition
from millstream.spark.sources.batch_reader import ReadOptions, StreamDataFrameReader, StreamInputPartition
from millstream.spark.sources.stream_read import OffsetRange, StreamReadError
from millstream.startpoint.manager import StartpointManager
from millstream.startpoint.settings import StartpointConfig

if TYPE_CHECKING:
    import pyarrow

Positions = dict[str, str]
"""Partition number (as text, as JSON keys are) → the next offset to read there."""
Newest = dict[str, str]
"""Partition number → the newest offset present when the batch was planned (absent: the partition was empty)."""
Applied = dict[str, dict[str, Any]]
"""Partition number → the last startpoint applied there: ``{"created": epoch ms, "offset": resolved offset}``."""


def stream_reader(options: dict[str, str]) -> DataSourceStreamReader:
    """The stream reader of format ``millstream`` for ``options`` (lower-cased keys, as Spark hands them)."""
    starting = parse_starting_offsets(options.get("startingoffsets"))
    parsed = ReadOptions.parse(options)
    if _has_shards(Settings(parsed.config), parsed.stream.system):
        from millstream.spark.sources.shard_stream import ShardedStreamReader

        default, given = starting
        if given:
            raise StreamReadError(
                f"stream '{parsed.stream}': option 'startingOffsets' of a stream of shards is oldest or upcoming "
                "for every shard, not offsets per partition; start shards at sequence numbers with a startpoint"
            )
        return ShardedStreamReader(parsed, options.get("job"), default)
    return MillstreamStreamReader(parsed, options.get("job"), starting)


def _has_shards(config: Settings, system: str) -> bool:
    """Kinesis: partitions that come and go, planned by :mod:`millstream.spark.sources.shard_stream`."""
    with system_factory(config, system).get_admin(system, config) as admin:
        return not admin.partitions_are_fixed


@dataclass(frozen=True)
class SourceOffset:
    """Spark's offset for this source, kept as JSON in its offset log."""

    offsets: Positions
    newest: Newest
    startpoints: Applied

    def to_json(self) -> dict[str, Any]:
        return {"offsets": self.offsets, "newest": self.newest, "startpoints": self.startpoints}

    @classmethod
    def of(cls, document: dict[str, Any]) -> SourceOffset:
        return cls(
            dict(document.get("offsets", {})), dict(document.get("newest", {})), dict(document.get("startpoints", {}))
        )


class MillstreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches on the driver (offsets and startpoints); each Spark task reads one partition's range
    with the batch reader. Holds only options, so Spark can ship it to its workers."""

    def __init__(self, options: ReadOptions, job: str | None, starting: StartingOffsets) -> None:
        self.options = options
        self.job = job
        self.starting = starting
        self.target: tuple[Positions, Newest] | None = None
        """With ``Trigger.AvailableNow``: the upcoming offsets when the query started, which it reads up to."""

    @property
    def config(self) -> Settings:
        """The job's settings, built once with the options (each view parsed once, not once per batch)."""
        return self.options.settings

    @functools.cached_property
    def _stream_config(self) -> Settings:
        """The settings whose metadata store holds the query's startpoints: ``job.name`` from option ``job``;
        built on first use and kept for the query's batches (not pickled with the reader, see ``__getstate__``)."""
        return self.config if not self.job else self.config.with_overrides({"job.name": self.job})

    def __getstate__(self) -> dict[str, Any]:
        """What Spark ships to its workers: the options and the reader's plan, not settings built from them."""
        return {name: value for name, value in self.__dict__.items() if name != "_stream_config"}

    def _ssp(self, partition: str | int) -> SystemStreamPartition:
        return self.options.stream.partition(int(partition))

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Where a query without a checkpoint starts: ``startingOffsets`` (a word for every partition, or JSON per
        partition), the oldest offsets by default."""
        default, given = self.starting
        with _admin(self.config, self.options.stream.system) as admin:
            partitions = self._partitions(admin)
            unknown = sorted(set(given) - set(partitions))
            if unknown:
                raise StreamReadError(
                    f"option 'startingOffsets' names partition(s) {unknown} of stream '{self.options.stream}', "
                    f"which has partitions {partitions}"
                )
            positions = {str(p): admin.resolve_startpoint(self._ssp(p), given.get(p, default)) for p in partitions}
        return SourceOffset(positions, {}, {}).to_json()

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802 - Spark's name
        with _admin(self.config, self.options.stream.system) as admin:
            self.target = self._upcoming(admin)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802 - Spark's name
        """Every partition's upcoming offset (or the AvailableNow target), with the startpoints not yet applied
        resolved and recorded; startpoints ``start`` already applied are deleted (their batch has finished)."""
        begun = SourceOffset.of(start)
        with _admin(self.config, self.options.stream.system) as admin:
            positions, newest = self.target if self.target is not None else self._upcoming(admin)
            positions = dict(positions)
            applied = dict(begun.startpoints)
            with metadata_store(self._stream_config) as store:
                manager = StartpointManager(store, self.config.view(StartpointConfig).max_age_ms)
                for partition in sorted(positions, key=int):
                    ssp = self._ssp(partition)
                    startpoint = manager.read_startpoint(ssp)
                    if startpoint is None:
                        continue
                    if begun.startpoints.get(partition, {}).get("created") == startpoint.creation_timestamp:
                        manager.delete_startpoint(ssp)
                        continue
                    resolved = admin.resolve_startpoint(ssp, startpoint)
                    applied[partition] = {"created": startpoint.creation_timestamp, "offset": resolved}
                    positions[partition] = _later(admin, ssp, positions[partition], resolved)
        return SourceOffset(positions, newest, applied).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """A range per partition from where the previous batch ended, or from the startpoint this batch applies,
        to the newest offset at the end's planning (inclusive); partitions with nothing to read are left out."""
        begun, ending = SourceOffset.of(start), SourceOffset.of(end)
        planned: list[InputPartition] = []
        with _admin(self.config, self.options.stream.system) as admin:
            for partition, last in sorted(ending.newest.items(), key=lambda item: int(item[0])):
                ssp = self._ssp(partition)
                applied = ending.startpoints.get(partition)
                if applied is not None and applied != begun.startpoints.get(partition):
                    first = str(applied["offset"])
                elif partition in begun.offsets:
                    first = begun.offsets[partition]
                else:  # a partition the stream gained since the previous batch
                    first = admin.resolve_startpoint(ssp, StartpointOldest())
                order = admin.offset_comparator(first, last)
                if order is None:
                    raise StreamReadError(f"{ssp}: offsets '{first}' and '{last}' cannot be compared")
                if order <= 0:
                    planned.append(StreamInputPartition(OffsetRange(ssp, first, last, end_inclusive=True)))
        return planned

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        return StreamDataFrameReader(self.options).read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished every batch up to ``end``: the startpoints it applied are done with."""
        applied = SourceOffset.of(end).startpoints
        if not applied:
            return
        with metadata_store(self._stream_config) as store:
            manager = StartpointManager(store, self.config.view(StartpointConfig).max_age_ms)
            for partition, entry in applied.items():
                ssp = self._ssp(partition)
                startpoint = manager.read_startpoint(ssp)
                if startpoint is not None and startpoint.creation_timestamp == entry.get("created"):
                    manager.delete_startpoint(ssp)

    def _partitions(self, admin: SystemAdmin) -> list[int]:
        stream = self.options.stream
        if not admin.partitions_are_fixed:
            raise StreamReadError(
                f"stream '{stream}': system '{stream.system}' has partitions that come and go (shards), which the "
                "streaming source does not support yet; read it with a job instead"
            )
        metadata = admin.get_system_stream_metadata([stream.stream]).get(stream.stream)
        if metadata is None:
            raise StreamReadError(f"stream '{stream}' does not exist in system '{stream.system}'")
        return sorted(metadata.partitions)

    def _upcoming(self, admin: SystemAdmin) -> tuple[Positions, Newest]:
        """Every partition's upcoming offset, and the newest offset of those that hold records."""
        stream = self.options.stream
        self._partitions(admin)
        partitions = sorted(admin.get_system_stream_metadata([stream.stream])[stream.stream].partitions.items())
        upcoming = {str(p): info.upcoming_offset for p, info in partitions}
        return upcoming, {str(p): info.newest_offset for p, info in partitions if info.newest_offset is not None}


StartingOffsets = tuple[Startpoint, dict[int, Startpoint]]
"""Where a new query starts: every partition's default, and those given per partition."""

_WORDS: dict[str, Startpoint] = {
    "oldest": StartpointOldest(),
    "earliest": StartpointOldest(),
    "-2": StartpointOldest(),
    "upcoming": StartpointUpcoming(),
    "latest": StartpointUpcoming(),
    "-1": StartpointUpcoming(),
}
"""Millstream's words and Spark's Kafka source's (``earliest``/``latest``, -2/-1 in its JSON)."""


def parse_starting_offsets(text: str | None) -> StartingOffsets:
    """``oldest`` / ``upcoming`` for every partition, or JSON per partition (``{"0": "15", "1": "latest"}``)."""
    if not text or not text.strip():
        return StartpointOldest(), {}
    word = text.strip().lower()
    if word in _WORDS:
        return _WORDS[word], {}
    try:
        given = orjson.loads(text)
    except orjson.JSONDecodeError:
        given = None
    if not isinstance(given, dict) or not all(key.isdigit() and isinstance(v, str | int) for key, v in given.items()):
        raise StreamReadError(
            f"option 'startingOffsets' must be oldest, upcoming or JSON mapping partitions to offsets "
            f'(e.g. {{"0": "15", "1": "oldest"}}), not {text!r}'
        )
    return StartpointOldest(), {
        int(key): _WORDS.get(str(value).lower(), StartpointSpecific(str(value))) for key, value in given.items()
    }


def _later(admin: SystemAdmin, ssp: SystemStreamPartition, first: str, second: str) -> str:
    order = admin.offset_comparator(first, second)
    if order is None:
        raise StreamReadError(f"{ssp}: offsets '{first}' and '{second}' cannot be compared")
    return second if order < 0 else first


@contextmanager
def _admin(config: Settings, system: str) -> Iterator[SystemAdmin]:
    """A started admin of ``system`` for one planning step, stopped after it."""
    with system_factory(config, system).get_admin(system, config) as admin:
        admin.start()
        yield admin
