"""Format ``millstream-store``: a store's key/value rows as a DataFrame, to audit a job's state with Spark SQL.

::

    spark.read.format("millstream-store").option("config", "job.yaml").option("store", "counts").load()

One row per key of every task's copy of the store (``task``, ``key``, ``value``), one Spark partition per task,
read from the task's latest snapshot in the blob store or from its changelog (``source``: ``blob`` or
``changelog``; default: the blob store when the store backs up there, else its changelog; see
:mod:`millstream.spark.sources.store_read`). Keys and values are decoded by the store's serdes into JSON text, as
format ``millstream`` decodes a stream's, or left as the bytes stored with ``raw``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from millstream.config.core import load_config, parse_bool
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.errors import MillstreamError
from millstream.extras import missing_module_hint
from millstream.serde.base import Serde
from millstream.serde.registry import SerdeRegistry
from millstream.spark.sources.batch_reader import DEFAULT_IDLE_TIMEOUT_MS
from millstream.spark.sources.store_read import TaskStoreSource, default_source, plan_store_read, read_task_store
from millstream.spark.sources.stream_read import StreamReadError

FORMAT = "millstream-store"


def store_schema(raw: bool) -> StructType:
    payload = BinaryType() if raw else StringType()
    return StructType(
        [
            StructField("task", StringType(), nullable=False),
            StructField("key", payload, nullable=False),
            StructField("value", payload, nullable=True),
        ]
    )


@dataclass(frozen=True)
class StoreReadOptions:
    """The options of ``spark.read.format("millstream-store")``, checked on the driver before any task runs."""

    config: dict[str, str]
    store: str
    source: str
    raw: bool

    @classmethod
    def parse(cls, options: dict[str, str]) -> StoreReadOptions:
        path, store = options.get("config"), options.get("store")
        if not path or not store:
            raise StreamReadError(
                f"format '{FORMAT}' needs options 'config' (the job's config file) and 'store' (the store's name)"
            )
        config = Settings.of(load_config(path))
        source = options.get("source") or default_source(config, store)
        return cls(config.to_dict(), store, source, parse_bool("raw", options.get("raw", "false")))


class MillstreamStoreDataSource(DataSource):
    """Spark's entry point for format ``millstream-store``; Spark hands it the options, case-insensitively."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return store_schema(parse_bool("raw", self.options.get("raw", "false")))

    def reader(self, schema: StructType) -> DataSourceReader:
        return StoreDataFrameReader(StoreReadOptions.parse(dict(self.options)))


@dataclass(frozen=True)
class TaskStorePartition(InputPartition):
    """One task's copy of the store: what one Spark task reads."""

    source: TaskStoreSource


class StoreDataFrameReader(DataSourceReader):
    def __init__(self, options: StoreReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        planned = plan_store_read(Settings(self.options.config), self.options.store, self.options.source)
        return [TaskStorePartition(source) for source in planned]

    def read(self, partition: InputPartition) -> Iterator[tuple[str, Any, Any]]:
        assert isinstance(partition, TaskStorePartition)
        config = Settings(self.options.config)
        decode = StoreEntryDecoder(config, self.options.store, partition.source.task, self.options.raw)
        entries = read_task_store(config, self.options.store, partition.source, DEFAULT_IDLE_TIMEOUT_MS / 1000)
        for key, value in entries:
            yield partition.source.task, decode(key, key, "key"), decode(key, value, "value")


class StoreEntryDecoder:
    """Bytes as stored → JSON text through the store's serdes (bytes unchanged with ``raw``); a value that
    cannot be decoded is an error naming task, store and key, never a null."""

    def __init__(self, config: Settings, store: str, task: str, raw: bool) -> None:
        own = config.view(StoreConfig, store)
        serdes = SerdeRegistry.from_config(config)
        self.serdes: dict[str, Serde | None] = {
            "key": serdes.get(own.key_serde, f"stores.{store}.key.serde") if own.key_serde else None,
            "value": serdes.get(own.msg_serde, f"stores.{store}.msg.serde") if own.msg_serde else None,
        }
        self.store, self.task, self.raw = store, task, raw

    def __call__(self, key: bytes, data: bytes, column: str) -> Any:
        if self.raw:
            return data
        serde = self.serdes[column]
        try:
            decoded = serde.from_bytes(data) if serde is not None else data
            return orjson.dumps(decoded, option=orjson.OPT_NON_STR_KEYS).decode()
        except (MillstreamError, orjson.JSONEncodeError, ValueError, TypeError) as error:
            raise StreamReadError(
                f"store '{self.store}' task '{self.task}': cannot turn a {column} into JSON "
                f"of key {key[:64]!r} ({type(error).__name__}: {error}); configure "
                f"stores.{self.store}.{'key' if column == 'key' else 'msg'}.serde or read with .option('raw', 'true')"
            ) from None


_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def register(spark: SparkSession, *, required: bool = True) -> None:
    """Make format ``millstream-store`` known to ``spark``, once per session; without pyarrow refused, or
    left out when not ``required`` (see :func:`millstream.spark.sources.datasource.register`)."""
    if spark in _registered:
        return
    missing = missing_module_hint("pyarrow", "format 'millstream-store' (stores as DataFrames)")
    if missing is not None:
        if required:
            raise MillstreamError(missing)
        return
    spark.dataSource.register(MillstreamStoreDataSource)
    _registered.add(spark)
