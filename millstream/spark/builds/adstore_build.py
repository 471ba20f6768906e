"""Bulk builds of versioned adjunct stores with Spark: a dataset becomes RocksDB table files, published as
a new version the running job switches to (``millstream adstore build``).

Where Spark is strong, the build runs on the cluster: executors read the dataset, encode keys and
values with the store's serdes, shuffle each record to its file, sort, write one table file per file
and upload it. Only file names and counts come back to the driver, which then publishes the version.

Layouts:

- ``partitioned`` (the input stream is not broadcast): one file per stream partition, holding exactly
  the records whose key the stream's producer would send to that partition, so the task reading
  partition p ingests ``part-<p>.sst`` and finds every key it may be asked for.
- ``broadcast`` (the stream is in ``task.broadcast.inputs``): the dataset is range-partitioned by key
  into non-overlapping files, listed in key order; every container ingests them all.

Only the CLI and tests import this module: the runtime must run without Spark (DESIGN §2).
"""

from __future__ import annotations

import itertools
import logging
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from millstream.adjunct.published import (
    BROADCAST_FILES,
    Layout,
    PublishedVersion,
    new_version_id,
    publish_version,
    retire_versions,
    store_blob_prefix,
    version_blob_name,
)
from millstream.adjunct.sst import write_sst
from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.core import Config
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, store_names
from millstream.contracts.blobstore import RetryPolicy, blob_store
from millstream.errors import ConfigError, MillstreamError
from millstream.model import SystemStream
from millstream.serde.base import Serde
from millstream.serde.registry import SerdeRegistry
from millstream.spark.run.connect import is_connect
from millstream.spark.run.multi_host import refuse_host_local_blobs
from millstream.storage.factory import storage_engine_factory
from millstream.storage.rocksdb import RocksDbStorageEngineFactory

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

FORMATS = ("csv", "json", "parquet")
QUERIES = ("table", "sql")
"""Inputs that are not files: ``source`` names a table of the session's catalog, or is a SQL query."""
_ROW_SHOWN = 200


class BulkBuildError(MillstreamError):
    """A bulk build failed; nothing was published and its uploaded files were deleted."""


class DatasetError(BulkBuildError):
    """A record of the dataset cannot go into a version: names the path and the row or key at fault."""


class DatasetSchemaError(BulkBuildError):
    """The dataset cannot be read as asked (path, format, columns): found before any record is built."""


@dataclass(frozen=True)
class _Target:
    """Where a build's records go, decided on the driver from config and the input stream's metadata."""

    stream: SystemStream
    layout: Layout
    partition_count: int
    partitioner: Callable[[bytes, int], int] | None


@dataclass(frozen=True)
class _Plan:
    """Everything an executor needs, shipped with the tasks (config included: executors build their own
    serdes and blob store)."""

    config: Settings
    store: str
    version: str
    source: str
    target: _Target
    key_column: str
    value_column: str | None
    """None: the value is the whole row without its key column, as a dict."""

    @property
    def key_serde_name(self) -> str | None:
        return self.config.view(StoreConfig, self.store).key_serde

    @property
    def msg_serde_name(self) -> str | None:
        return self.config.view(StoreConfig, self.store).msg_serde


@dataclass(frozen=True)
class _FileResult:
    """What one executor task reports: its file (None when its share of the dataset was empty) or the
    first problem it met."""

    index: int
    blob_id: str | None
    records: int
    skipped: int
    problem: str | None = None


def build_version(
    spark: SparkSession,
    config: Config,
    store: str,
    source: str,
    fmt: str,
    *,
    key_column: str = "key",
    value_column: str | None = None,
    range_files: int | None = None,
) -> PublishedVersion:
    """Build a version of ``store`` from the dataset at ``source`` (``csv`` with a header, ``json`` lines,
    or ``parquet``), or from the table or the SQL query ``source`` (``fmt`` ``table`` or ``sql``), publish
    it, and return its record. ``spark`` may be a classic session or a Spark Connect client.

    The value of a record is ``value_column``, else the column ``value``, else the whole row without
    the key column as a dict. Rows whose value is null are skipped (counted in ``skipped``); a null or
    duplicate key fails the build. ``range_files`` (broadcast layout): how many files, default Spark's
    default parallelism. Raises ``ConfigError`` for a store that cannot be bulk-built,
    ``DatasetSchemaError`` / ``DatasetError`` for a dataset that cannot become a version, and
    ``BulkBuildError`` when the build fails; in every case nothing is published. ``config``: the job's
    ``Settings``, or a loaded ``Config`` (read as settings, so the executors that get it parse each view once).
    """
    config = Settings.of(config)
    target = resolve_target(config, store)
    refuse_host_local_blobs(config, _master(spark))
    if fmt not in FORMATS + QUERIES:
        raise DatasetSchemaError(f"unknown dataset format '{fmt}' (accepted: {', '.join(FORMATS + QUERIES)})")
    frame = _read(spark, source, fmt)
    source = described_source(source, fmt)
    value_column = _check_columns(config, store, frame, source, key_column, value_column)
    plan = _Plan(config, store, new_version_id(), source, target, key_column, value_column)
    results = _run(spark, frame, plan, range_files)
    problems = [result.problem for result in sorted(results, key=lambda r: r.index) if result.problem]
    if problems:
        _delete_version_files(plan)
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise DatasetError(f"adjunct store '{store}': {problems[0]}{more}; nothing was published")
    record = _record(plan, results)
    metadata = metadata_store(config)
    metadata.init()
    try:
        try:
            publish_version(metadata, record)
        except MillstreamError:
            _delete_version_files(plan)
            raise
        try:
            retired = retire_versions(config, metadata, store)
        except (MillstreamError, OSError) as error:  # the version is published; the next build retries
            log.warning("adjunct store '%s': cannot delete the files of old versions: %s", store, error)
        else:
            if retired:
                log.info("adjunct store '%s': deleted the files of version(s) %s", store, ", ".join(retired))
    finally:
        metadata.close()
    return record


def resolve_target(config: Config, store: str) -> _Target:
    """Check that ``store`` can be bulk-built and find where its records go; ``ConfigError`` names the key
    at fault. ``config``: the job's ``Settings``, or a loaded ``Config`` (read as settings: users call this at
    an old path)."""
    config = Settings.of(config)
    if store not in store_names(config):
        configured = ", ".join(store_names(config)) or "none"
        raise ConfigError(f"store '{store}' is not configured (no 'stores.{store}.*' keys; stores: {configured})")
    settings = config.view(StoreConfig, store)
    stream = settings.adjunct_input(store)
    if not settings.adstore_versioned:
        raise ConfigError(
            f"store '{store}' is not versioned: bulk-built versions need 'stores.{store}.adstore.versioned=true'"
        )
    if not isinstance(storage_engine_factory(config, store), RocksDbStorageEngineFactory):
        raise ConfigError(
            f"config key 'stores.{store}.factory' is '{settings.factory}': bulk-built versions are RocksDB table "
            "files, the store must use the rocksdb engine"
        )
    serdes = SerdeRegistry.from_config(config)
    for kind, name in (("key", settings.key_serde), ("msg", settings.msg_serde)):
        if name:
            serdes.get(name, f"stores.{store}.{kind}.serde")
    factory = system_factory(config, stream.system)
    admin = factory.get_admin(stream.system, config)
    admin.start()
    try:
        metadata = admin.get_system_stream_metadata([stream.stream]).get(stream.stream)
    finally:
        admin.stop()
    if metadata is None:
        raise ConfigError(
            f"config key 'stores.{store}.adstore.input' names stream '{stream}', which does not exist "
            "(its partition count decides the layout of a version)"
        )
    if any(ssp.system_stream == stream for ssp in config.task.broadcast_ssps()):
        return _Target(stream, "broadcast", metadata.partition_count, None)
    partitioner = factory.key_partitioner()
    if partitioner is None:
        raise ConfigError(
            f"system '{stream.system}' ({type(factory).__name__}, systems.{stream.system}.samza.factory) cannot "
            f"tell which partition a key goes to, so store '{store}' cannot be bulk-built partitioned by its input "
            f"'{stream}' (a broadcast input, task.broadcast.inputs, can)"
        )
    return _Target(stream, "partitioned", metadata.partition_count, partitioner)


def described_source(source: str, fmt: str) -> str:
    """How errors and the version's record name the input: a path as it is, a table or query by its kind."""
    if fmt == "table":
        return f"table {source}"
    if fmt == "sql":
        return f"query {' '.join(source.split())}"
    return source


def _read(spark: SparkSession, source: str, fmt: str) -> DataFrame:
    from pyspark.errors import AnalysisException

    try:
        if fmt == "table":
            frame = spark.read.table(source)
        elif fmt == "sql":
            frame = spark.sql(source)
        else:
            reader = spark.read.format(fmt)
            if fmt == "csv":
                reader = reader.option("header", "true").option("inferSchema", "true")
            frame = reader.load(source)
        frame.schema  # noqa: B018  # a Connect client analyses lazily: a bad input fails here, not mid-build
    except AnalysisException as error:
        what = f"dataset '{source}' as {fmt}" if fmt in FORMATS else described_source(source, fmt)
        raise DatasetSchemaError(f"cannot read {what}: {_first_line(error)}") from None
    return frame


def _check_columns(
    config: Settings, store: str, frame: DataFrame, source: str, key_column: str, value_column: str | None
) -> str | None:
    """The value column to use (None: the whole row); refuses missing columns and, for a store without a
    serde, columns that are not already bytes."""
    from pyspark.sql.types import BinaryType

    columns = frame.columns
    shown = ", ".join(columns) or "none"
    for role, column in (("key", key_column), ("value", value_column)):
        if column is not None and column not in columns:
            raise DatasetSchemaError(f"dataset '{source}' has no {role} column '{column}' (columns: {shown})")
    if value_column is None and "value" in columns and key_column != "value":
        value_column = "value"
    settings = config.view(StoreConfig, store)
    types = {field.name: field.dataType for field in frame.schema.fields}
    if settings.key_serde is None and not isinstance(types[key_column], BinaryType):
        raise ConfigError(
            f"store '{store}' has no key serde (stores.{store}.key.serde) and key column '{key_column}' of "
            f"'{source}' is {types[key_column].simpleString()}, not binary: configure stores.{store}.key.serde"
        )
    if settings.msg_serde is None and (value_column is None or not isinstance(types[value_column], BinaryType)):
        what = f"column '{value_column}'" if value_column else "the row (no 'value' column)"
        kind = types[value_column].simpleString() if value_column else "a record"
        raise ConfigError(
            f"store '{store}' has no value serde (stores.{store}.msg.serde) and the value, {what} of '{source}', "
            f"is {kind}, not binary: configure stores.{store}.msg.serde"
        )
    return value_column


def _run(spark: SparkSession, frame: DataFrame, plan: _Plan, range_files: int | None) -> list[_FileResult]:
    """Encode, shuffle each record to its file, sort, write: DataFrame operations only (``mapInArrow``,
    ``repartition``, ``sortWithinPartitions``), so the build runs alike on a classic session and through
    Spark Connect, where a session has no ``sparkContext`` and DataFrames no ``rdd``."""
    from pyspark import StorageLevel

    encoded = frame.mapInArrow(partial(_encode, plan), ENCODED_SCHEMA)
    _describe(spark, f"millstream adstore build {plan.store} {plan.version}")
    try:
        if plan.target.layout == "partitioned":
            shuffled = encoded.repartition(plan.target.partition_count, "partition")
        else:
            encoded.persist(StorageLevel.MEMORY_AND_DISK)  # the range partitioner samples it before the shuffle
            shuffled = encoded.repartitionByRange(range_files or default_range_files(spark), "key")
        written = shuffled.sortWithinPartitions("partition", "key").mapInArrow(partial(_write, plan), RESULT_SCHEMA)
        return [_FileResult(**row.asDict()) for row in written.collect()]
    except Exception as error:  # Spark reports executor failures as Py4J / PySpark / gRPC exceptions
        _delete_version_files(plan)
        raise BulkBuildError(
            f"adjunct store '{plan.store}': the build of version '{plan.version}' from '{plan.source}' failed: "
            f"{_spark_problem(error)}"
        ) from error
    finally:
        if plan.target.layout == "broadcast":
            encoded.unpersist()
        _describe(spark, None)


def _describe(spark: SparkSession, text: str | None) -> None:
    """The description of the build's Spark jobs in the UI; a Connect client cannot set one (the server
    names the jobs after the client's operations)."""
    if not is_connect(spark):
        spark.sparkContext.setJobDescription(text)  # type: ignore[arg-type]  # None clears it


def _master(spark: SparkSession) -> str:
    """The session's master; a Connect client asks the server's conf ("local" when it does not say)."""
    if not is_connect(spark):
        return str(spark.sparkContext.master)
    return str(spark.conf.get("spark.master", None) or "local")


def default_range_files(spark: SparkSession) -> int:
    """How many files a broadcast build writes by default: Spark's default parallelism; a Connect client
    cannot ask the scheduler, so it takes ``spark.default.parallelism``, else ``spark.sql.shuffle.partitions``."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    configured = spark.conf.get("spark.default.parallelism", None) or spark.conf.get("spark.sql.shuffle.partitions")
    return int(configured or 1)


def _record(plan: _Plan, results: list[_FileResult]) -> PublishedVersion:
    written = sorted((r for r in results if r.blob_id is not None), key=lambda r: r.index)
    if plan.target.layout == "partitioned":
        files = {str(r.index): [r.blob_id] for r in written if r.blob_id}
    else:
        files = {BROADCAST_FILES: [r.blob_id for r in written if r.blob_id]}
    return PublishedVersion(
        store=plan.store,
        version=plan.version,
        created_ms=int(time.time() * 1000),
        layout=plan.target.layout,
        files=files,
        records=sum(r.records for r in results),
        source=plan.source,
        partition_count=plan.target.partition_count if plan.target.layout == "partitioned" else 0,
        skipped=sum(r.skipped for r in results),
    )


def _delete_version_files(plan: _Plan) -> None:
    """Best effort: retention deletes what is left once two newer versions are published."""
    prefix = f"{store_blob_prefix(plan.config, plan.store)}{plan.version}/"
    blobs = blob_store(plan.config)
    try:
        for blob_id in blobs.list(prefix):
            blobs.delete(blob_id)
    except (MillstreamError, OSError) as error:
        log.warning(
            "adjunct store '%s': cannot delete the files of failed version '%s': %s", plan.store, plan.version, error
        )
    finally:
        blobs.close()


# -- in the executors ---------------------------------------------------------------------------------------

ENCODED_SCHEMA = "partition int, key binary, value binary, problem string"
"""One encoded record: the stream partition its key goes to (0 in a broadcast build), key and value bytes
(null: skipped), or, with partition ``_PROBLEM_PARTITION``, the first problem of a share of the dataset."""
RESULT_SCHEMA = "index int, blob_id string, records long, skipped long, problem string"
_PROBLEM_PARTITION = -1
"""Sorts before every stream partition, so the writer that gets a problem reports it before writing."""


def _encode(plan: _Plan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Dataset rows → rows of ``ENCODED_SCHEMA``; the first problem of this share of the dataset ends it as
    a single problem row."""
    encoder = _Encoder(plan)
    for batch in batches:
        encoded: dict[str, list[Any]] = {"partition": [], "key": [], "value": [], "problem": []}
        for row in batch.to_pylist(maps_as_pydicts="strict"):
            partition, key, value, problem = encoder.encode(row)
            for column, item in zip(encoded, (partition, key, value, problem), strict=True):
                encoded[column].append(item)
            if problem is not None:
                yield _batch(encoded, ENCODED_SCHEMA)
                return
        yield _batch(encoded, ENCODED_SCHEMA)


class _Encoder:
    """The serdes and partitioner of a plan, built once per share of the dataset in the executor."""

    def __init__(self, plan: _Plan) -> None:
        serdes = SerdeRegistry.from_config(plan.config)
        key_name, msg_name = plan.key_serde_name, plan.msg_serde_name
        self.plan = plan
        self.key_serde = serdes.get(key_name) if key_name else None
        self.msg_serde = serdes.get(msg_name) if msg_name else None
        self.stream_key_serde = serdes.key_serde(plan.target.stream)

    def encode(self, row: dict[str, Any]) -> tuple[int, bytes | None, bytes | None, str | None]:
        """(stream partition, key bytes, value bytes or None, None), or a problem naming the row or key."""
        plan = self.plan
        key = _plain(row[plan.key_column])
        if key is None:
            return (
                _PROBLEM_PARTITION,
                b"",
                None,
                (f"row {_shown(row)} of '{plan.source}' has a null key (column '{plan.key_column}')"),
            )
        try:
            key_bytes = _encoded(self.key_serde, key)
            if plan.value_column is not None:
                value = _plain(row[plan.value_column])
            else:
                value = {name: _plain(item) for name, item in row.items() if name != plan.key_column}
            value_bytes = None if value is None else _encoded(self.msg_serde, value)
            partition = 0
            partitioner = plan.target.partitioner
            if partitioner is not None:
                serde = self.stream_key_serde
                partition_bytes = key_bytes if serde is None else serde.to_bytes(key)
                partition = partitioner(partition_bytes, plan.target.partition_count)
        except Exception as error:  # serdes raise SerdeError, user serdes anything
            return _PROBLEM_PARTITION, b"", None, f"row with key {key!r} of '{plan.source}' cannot be encoded: {error}"
        return partition, key_bytes, value_bytes, None


def _write(plan: _Plan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A sorted share of ``ENCODED_SCHEMA`` rows → one table file per stream partition in it (partitioned),
    or one file (broadcast, named by the Spark partition, which orders the key ranges), uploaded; reports
    each file's blob id and counts as ``RESULT_SCHEMA`` rows, or the first problem."""
    from pyspark import TaskContext

    rows = (
        row
        for batch in batches
        for row in zip(
            *(batch.column(name).to_pylist() for name in ("partition", "key", "value", "problem")), strict=True
        )
    )
    context = TaskContext.get()
    range_index = context.partitionId() if context is not None else 0
    for partition, group in itertools.groupby(rows, key=lambda row: row[0]):
        if partition == _PROBLEM_PARTITION:
            problem = next(group)[3]
            yield _batch(_results([_FileResult(partition, None, 0, 0, problem)]), RESULT_SCHEMA)
            return
        index = partition if plan.target.layout == "partitioned" else range_index
        result = _write_file(plan, index, group)
        yield _batch(_results([result]), RESULT_SCHEMA)
        if result.problem is not None:
            return


def _write_file(plan: _Plan, index: int, rows: Iterable[tuple[int, bytes, bytes | None, str | None]]) -> _FileResult:
    """Rows of one file, sorted by key → the file, uploaded (no file when every value was null)."""
    problem: list[str] = []
    skipped = [0]

    def entries() -> Iterator[tuple[bytes, bytes]]:
        previous: bytes | None = None
        for _, key, value, _ in rows:
            if key == previous:
                problem.append(f"key {_decoded_key(plan, key)!r} appears more than once in '{plan.source}'")
                return
            previous = key
            if value is None:
                skipped[0] += 1
                continue
            yield key, value

    prefix = "part" if plan.target.layout == "partitioned" else "range"
    file_name = f"{prefix}-{index:05d}.sst"
    with tempfile.TemporaryDirectory(prefix="millstream-adstore-") as directory:
        path = Path(directory) / file_name
        records = write_sst(path, entries())
        if problem:
            return _FileResult(index, None, 0, skipped[0], problem[0])
        blob_id = _upload(plan, path, file_name) if records else None
    return _FileResult(index, blob_id, records, skipped[0])


def _results(results: list[_FileResult]) -> dict[str, list[Any]]:
    return {name: [getattr(result, name) for result in results] for name in _FileResult.__dataclass_fields__}


def _batch(columns: dict[str, list[Any]], schema: str) -> pa.RecordBatch:
    import pyarrow as pa

    return pa.RecordBatch.from_pydict(columns, schema=_arrow_schema(schema))


def _arrow_schema(schema: str) -> pa.Schema:
    import pyarrow as pa

    types = {"int": pa.int32(), "long": pa.int64(), "binary": pa.binary(), "string": pa.string()}
    return pa.schema([(name, types[kind]) for name, kind in (field.split() for field in schema.split(", "))])


def _upload(plan: _Plan, path: Path, file_name: str) -> str:
    name = version_blob_name(plan.config, plan.store, plan.version, file_name)
    blobs = blob_store(plan.config)
    size = path.stat().st_size

    def attempt() -> str:
        with open(path, "rb") as source:
            return blobs.put(name, source, size)

    try:
        return RetryPolicy.of(plan.config).run(attempt, f"adjunct store '{plan.store}': upload of '{name}'")
    finally:
        blobs.close()


def _encoded(serde: Serde | None, value: Any) -> bytes:
    if serde is not None:
        return bytes(serde.to_bytes(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{type(value).__name__} is not bytes and the store has no serde for it")


def _plain(value: Any) -> Any:
    """Spark's row values as the plain Python values serdes expect (Row → dict, bytearray → bytes)."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {name: _plain(item) for name, item in value.asDict().items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {name: _plain(item) for name, item in value.items()}
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _shown(row: Any) -> str:
    text = repr(_plain(row))
    return text if len(text) <= _ROW_SHOWN else text[: _ROW_SHOWN - 3] + "..."


def _decoded_key(plan: _Plan, key: bytes) -> Any:
    name = plan.key_serde_name
    if name is None:
        return key
    try:
        return SerdeRegistry.from_config(plan.config).get(name).from_bytes(key)
    except Exception:  # the message must name the key even when it does not decode
        return key


_EXCEPTION_LINE = re.compile(r"^\s*(\w+\.)*\w*(Error|Exception): .+")


def _spark_problem(error: BaseException) -> str:
    """The last exception line of a Spark failure (the Python error inside the Java one), not its pages."""
    lines = [line.strip() for line in str(error).splitlines() if _EXCEPTION_LINE.match(line)]
    text = lines[-1] if lines else _first_line(error)
    return text if len(text) <= 500 else text[:497] + "..."


def _first_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
