"""The batch read of format ``millstream`` (:mod:`millstream.spark.sources.datasource`): a stream of any
millstream system as a Spark DataFrame; also what each task of a streaming read runs.

One row per record, one Spark partition per stream partition (or offset range of one, with
``maxRecordsPerPartition``), read by the system's own consumer (see :mod:`millstream.spark.sources.stream_read`
for how a read is bounded, :mod:`millstream.spark.sources.read_bounds` for the range options); one per
shard of a stream whose partitions split and merge (Kinesis), parents before children
(:mod:`millstream.spark.sources.shard_read`). Rows leave the Python worker as Arrow record batches, which
Spark takes without converting row by row.

The ``key`` and ``value`` columns are strings of JSON: serdes decode bytes to any Python object (a str,
a number, a dict from JSON or Avro, a message from Protobuf turned into a dict...), and JSON text is the
one column type every such object fits, which Spark SQL then takes apart with ``from_json`` or
``get_json_object``. With ``raw`` the columns are the bytes as stored, undecoded.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from millstream.composition.systems import system_factory
from millstream.config.core import load_config, parse_bool
from millstream.config.settings import Settings
from millstream.errors import MillstreamError
from millstream.model import IncomingMessageEnvelope, SystemStream
from millstream.serde.base import Serde
from millstream.serde.registry import SerdeRegistry
from millstream.spark.sources.read_bounds import ReadBounds, StreamReadError, parse_bounds
from millstream.spark.sources.shard_read import ShardRange, plan_shard_ranges, read_shard_range
from millstream.spark.sources.stream_read import OffsetRange, plan_ranges, read_range

if TYPE_CHECKING:
    import pyarrow

FORMAT = "millstream"
DEFAULT_IDLE_TIMEOUT_MS = 60_000


def stream_schema(raw: bool) -> StructType:
    """The columns of a stream read: JSON text for decoded keys and values, bytes for raw ones."""
    payload = BinaryType() if raw else StringType()
    return StructType(
        [
            StructField("partition", IntegerType(), nullable=False),
            StructField("offset", StringType(), nullable=False),
            StructField("timestamp", TimestampType(), nullable=True),
            StructField("key", payload, nullable=True),
            StructField("value", payload, nullable=True),
            StructField("headers", MapType(StringType(), BinaryType()), nullable=True),
        ]
    )


@dataclass(frozen=True)
class ReadOptions:
    """The options of ``spark.read.format("millstream")``, checked on the driver before any task runs."""

    config: dict[str, str]
    stream: SystemStream
    raw: bool
    bounds: ReadBounds
    max_records: int | None
    idle_timeout: float
    batch_size: int

    @classmethod
    def parse(cls, options: dict[str, str]) -> ReadOptions:
        path, stream = options.get("config"), options.get("stream")
        if not stream or not path:
            raise StreamReadError(
                "format 'millstream' needs options 'config' (the job's config file, which names the systems and "
                "serdes) and 'stream' (system.stream, e.g. log.page-views)"
            )
        return cls(
            config=load_config(path).to_dict(),
            stream=SystemStream.parse(stream),
            raw=parse_bool("raw", options.get("raw", "false")),
            bounds=parse_bounds(options),
            max_records=_positive_int(options, "maxRecordsPerPartition", 0) or None,
            idle_timeout=_positive_int(options, "idleTimeoutMs", DEFAULT_IDLE_TIMEOUT_MS) / 1000,
            batch_size=_positive_int(options, "batchSize", 10_000),
        )

    @functools.cached_property
    def settings(self) -> Settings:
        """``config`` as the job's settings, built on first use and kept with these options, so a stream reader
        planning batch after batch parses each view once, not once per batch. Not pickled: Spark ships the
        options (the flat ``config``, the wire format) and a worker builds its own settings from them."""
        return Settings(self.config)

    def __getstate__(self) -> dict[str, Any]:
        return {name: value for name, value in self.__dict__.items() if name != "settings"}


def _positive_int(options: dict[str, str], name: str, default: int) -> int:
    if name.lower() not in options:
        return default
    text = options[name.lower()]
    if not text.isdigit() or int(text) <= 0:
        raise StreamReadError(f"option '{name}' must be a positive integer, not {text!r}")
    return int(text)


@dataclass(frozen=True)
class StreamInputPartition(InputPartition):
    """One stream partition's offset range: what one Spark task reads."""

    range: OffsetRange | ShardRange


class StreamDataFrameReader(DataSourceReader):
    """Plans one Spark partition per stream partition or shard (offsets fixed at planning), reads each in a task."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        config = self.options.settings
        stream = self.options.stream
        ranges: Sequence[OffsetRange | ShardRange]
        if _partitions_are_fixed(config, stream):
            ranges = plan_ranges(config, stream, self.options.bounds, self.options.max_records)
        else:
            ranges = plan_shard_ranges(config, stream, self.options.bounds)
        return [StreamInputPartition(offsets) for offsets in ranges]

    def read(self, partition: InputPartition) -> Iterator[pyarrow.RecordBatch]:
        assert isinstance(partition, StreamInputPartition)
        config = self.options.settings
        rows = RecordBatchBuilder(self.options, config)
        offsets, idle_timeout = partition.range, self.options.idle_timeout
        batches = (
            read_range(config, offsets, idle_timeout)
            if isinstance(offsets, OffsetRange)
            else read_shard_range(config, offsets)
        )
        for envelopes in batches:
            rows.extend(envelopes)
            if len(rows) >= self.options.batch_size:
                yield rows.flush()
        if len(rows):
            yield rows.flush()


def _partitions_are_fixed(config: Settings, stream: SystemStream) -> bool:
    """Log and Kafka partitions are planned as offset ranges; Kinesis shards, which come and go, by shard."""
    return system_factory(config, stream.system).get_admin(stream.system, config).partitions_are_fixed


def _identity(data: Any) -> Any:
    return data


class RecordBatchBuilder:
    """Collects envelopes column by column and turns them into Arrow record batches of the read's schema."""

    def __init__(self, options: ReadOptions, config: Settings) -> None:
        import pyarrow

        self._pa = pyarrow
        self._arrow_schema = pyarrow.schema(
            [
                pyarrow.field("partition", pyarrow.int32(), nullable=False),
                pyarrow.field("offset", pyarrow.string(), nullable=False),
                pyarrow.field("timestamp", pyarrow.timestamp("us", tz="UTC")),
                pyarrow.field("key", pyarrow.binary() if options.raw else pyarrow.string()),
                pyarrow.field("value", pyarrow.binary() if options.raw else pyarrow.string()),
                pyarrow.field("headers", pyarrow.map_(pyarrow.string(), pyarrow.binary())),
            ]
        )
        self._stream = options.stream
        serdes = None if options.raw else SerdeRegistry.from_config(config)
        self._key_serde = serdes.key_serde(options.stream) if serdes else None
        self._msg_serde = serdes.msg_serde(options.stream) if serdes else None
        self._raw = options.raw
        self._columns: list[list[Any]] = [[] for _ in range(6)]

    def __len__(self) -> int:
        return len(self._columns[0])

    def extend(self, envelopes: list[IncomingMessageEnvelope]) -> None:
        """Adds a batch of one partition's envelopes, column by column (a comprehension per column costs
        a fraction of a method call per record)."""
        if not envelopes:
            return
        partition, offset, timestamp, key, value, headers = self._columns
        partition.extend([envelopes[0].ssp.partition] * len(envelopes))
        offset.extend([envelope.offset for envelope in envelopes])
        timestamp.extend([envelope.timestamp * 1000 if envelope.timestamp else None for envelope in envelopes])
        key.extend(self._payloads(envelopes, [envelope.key for envelope in envelopes], self._key_serde, "key"))
        value.extend(self._payloads(envelopes, [e.message for e in envelopes], self._msg_serde, "value"))
        headers.extend([list(envelope.headers.items()) if envelope.headers else None for envelope in envelopes])

    def _payloads(
        self, envelopes: list[IncomingMessageEnvelope], data: list[Any], serde: Serde | None, column: str
    ) -> list[Any]:
        if self._raw:
            return data
        decode = serde.from_bytes if serde is not None else _identity
        dumps, option = orjson.dumps, orjson.OPT_NON_STR_KEYS
        try:
            return [None if item is None else dumps(decode(item), option=option).decode() for item in data]
        except (MillstreamError, orjson.JSONEncodeError, ValueError, TypeError):
            for envelope, item in zip(envelopes, data, strict=True):
                self._payload(envelope, item, serde, column)
            raise

    def _payload(self, envelope: IncomingMessageEnvelope, data: Any, serde: Serde | None, column: str) -> Any:
        """One payload as JSON text, or an error naming the stream, partition and offset of the record."""
        if data is None:
            return data
        try:
            decoded = serde.from_bytes(data) if serde is not None else data
            return orjson.dumps(decoded, option=orjson.OPT_NON_STR_KEYS).decode()
        except (MillstreamError, orjson.JSONEncodeError, ValueError, TypeError) as error:
            raise StreamReadError(
                f"{self._stream} partition {envelope.ssp.partition} offset {envelope.offset}: cannot turn the "
                f"{column} into JSON ({type(error).__name__}: {error}); configure the stream's serde or read "
                "with .option('raw', 'true')"
            ) from None

    def flush(self) -> pyarrow.RecordBatch:
        arrays = [
            self._pa.array(column, type=field.type)
            for column, field in zip(self._columns, self._arrow_schema, strict=True)
        ]
        self._columns = [[] for _ in range(6)]
        return self._pa.RecordBatch.from_arrays(arrays, schema=self._arrow_schema)
