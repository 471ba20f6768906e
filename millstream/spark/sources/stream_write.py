"""Batch writes of a DataFrame to a stream: ``df.write.format("millstream")...save()``.

::

    df.write.format("millstream").option("config", "job.yaml").option("stream", "log.page-views").save()

Each Spark task sends its rows through the system's own producer, the way a job's task sends
messages: the ``key`` and ``value`` columns are JSON text decoded and then encoded by the stream's
serdes (or bytes written as they are with ``raw``), and a row lands in the partition the system's
partitioner gives its key — a ``partition`` column, when the DataFrame has one and the row's is not
null, pins it instead. ``headers`` (a map of string to bytes) is optional.

Delivery is at-least-once: a task's rows are flushed before the task reports success, and a task
Spark retries sends its rows again, so a failure part way may write some rows twice (Kafka's
idempotent producer removes the duplicates of its own retries, not those of a retried Spark task).
Only mode ``append`` is accepted: a stream cannot be overwritten.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from millstream.composition.systems import system_factory
from millstream.config.core import load_config, parse_bool
from millstream.config.settings import Settings
from millstream.errors import MillstreamError
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.serde.base import Serde
from millstream.serde.registry import SerdeRegistry
from millstream.spark.sources.read_bounds import StreamReadError

if TYPE_CHECKING:
    import pyarrow

PAYLOAD_COLUMNS = ("key", "value")
OPTIONAL_COLUMNS = ("partition", "headers")
SOURCE = "spark-dataframe"


class StreamWriteError(StreamReadError):
    """A DataFrame write to a stream is refused or fails; the message names the stream and the row at fault."""


@dataclass(frozen=True)
class WriteOptions:
    """The options of ``df.write.format("millstream")``, checked on the driver before any task runs."""

    config: dict[str, str]
    stream: SystemStream
    raw: bool

    @classmethod
    def parse(cls, options: dict[str, str], schema: StructType, overwrite: bool) -> WriteOptions:
        path, stream = options.get("config"), options.get("stream")
        if not stream or not path:
            raise StreamWriteError(
                "writing format 'millstream' needs options 'config' (the job's config file, which names the "
                "systems and serdes) and 'stream' (system.stream, e.g. log.page-views)"
            )
        if overwrite:
            raise StreamWriteError(
                f"stream '{stream}': mode 'overwrite' cannot apply to a stream, which is only appended to; "
                "use mode 'append'"
            )
        raw = parse_bool("raw", options.get("raw", "false"))
        _check_schema(stream, schema, raw)
        return cls(load_config(path).to_dict(), SystemStream.parse(stream), raw)


def _check_schema(stream: str, schema: StructType, raw: bool) -> None:
    names = set(schema.fieldNames())
    if "value" not in names:
        raise StreamWriteError(f"stream '{stream}': the DataFrame needs a 'value' column, it has {sorted(names)}")
    unknown = sorted(names - set(PAYLOAD_COLUMNS) - set(OPTIONAL_COLUMNS))
    if unknown:
        raise StreamWriteError(
            f"stream '{stream}': columns {unknown} have no place in a record; give key, value, partition, headers"
        )
    wanted = BinaryType() if raw else StringType()
    for name in PAYLOAD_COLUMNS:
        if name in names and schema[name].dataType != wanted:
            raise StreamWriteError(
                f"stream '{stream}': column '{name}' is {schema[name].dataType.simpleString()}; it must be "
                f"{wanted.simpleString()} ({'bytes as stored, with raw' if raw else 'JSON text the serde encodes'})"
            )


@dataclass(frozen=True)
class WriteCount(WriterCommitMessage):
    """What one Spark task wrote: its rows, per partition pinned (None: the partitioner's choice)."""

    rows: int


class StreamDataFrameWriter(DataSourceArrowWriter):
    """Sends each task's rows through the system's producer and flushes before the task succeeds."""

    def __init__(self, options: WriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pyarrow.RecordBatch]) -> WriteCount:
        config = Settings(self.options.config)
        stream = self.options.stream
        encoder = RowEncoder(self.options, config)
        rows = 0
        with system_factory(config, stream.system).get_producer(stream.system, config) as producer:
            producer.register(SOURCE)
            producer.start()
            for batch in iterator:
                for row in batch.to_pylist():
                    producer.send(SOURCE, encoder.envelope(row, rows))
                    rows += 1
            producer.flush(SOURCE)
        return WriteCount(rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task flushed its rows; nothing is left to make visible."""


class RowEncoder:
    """Turns a row's columns into an envelope the stream's serdes encoded, with errors naming the row."""

    def __init__(self, options: WriteOptions, config: Settings) -> None:
        self._stream = options.stream
        self._raw = options.raw
        serdes = None if options.raw else SerdeRegistry.from_config(config)
        self._key_serde = serdes.key_serde(options.stream) if serdes else None
        self._msg_serde = serdes.msg_serde(options.stream) if serdes else None

    def envelope(self, row: dict[str, Any], index: int) -> OutgoingMessageEnvelope:
        key = self._payload(row.get("key"), self._key_serde, "key", index)
        value = self._payload(row.get("value"), self._msg_serde, "value", index)
        headers = row.get("headers")
        return OutgoingMessageEnvelope(
            self._stream, value, key, partition=row.get("partition"), headers=dict(headers) if headers else None
        )

    def _payload(self, data: Any, serde: Serde | None, column: str, index: int) -> Any:
        if data is None or self._raw:
            return data
        try:
            decoded = orjson.loads(data)
            return serde.to_bytes(decoded) if serde is not None else decoded
        except (MillstreamError, orjson.JSONDecodeError, ValueError, TypeError) as error:
            raise StreamWriteError(
                f"{self._stream}: row {index} of the task: the {column} {str(data)[:80]!r} cannot be written "
                f"({type(error).__name__}: {error}); give JSON the stream's serde encodes, or bytes with "
                ".option('raw', 'true')"
            ) from None
