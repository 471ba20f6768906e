"""Format ``millstream``: read a stream of any millstream system as a Spark DataFrame (Python Data Source API).

::

    millstream.spark.datasource.register(spark)
    df = spark.read.format("millstream").option("config", "job.yaml").option("stream", "log.page-views").load()

The entry point Spark calls (:class:`MillstreamDataSource`) and the registration of the formats. The batch
read lives in :mod:`millstream.spark.sources.batch_reader`, the Structured Streaming one in
:mod:`millstream.spark.sources.streaming_source` (both import the batch reader, never this module, so the
formats' modules form no circle), writes in :mod:`millstream.spark.sources.stream_write`.
"""

from __future__ import annotations

import weakref

import pyspark
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from millstream.config.core import parse_bool
from millstream.errors import MillstreamError
from millstream.extras import missing_module_hint
from millstream.spark.sources.batch_reader import FORMAT, ReadOptions, StreamDataFrameReader, stream_schema
from millstream.spark.sources.checkpoints_datasource import MillstreamCheckpointsDataSource
from millstream.spark.sources.stream_write import StreamDataFrameWriter, WriteOptions

__all__ = ["FORMAT", "MillstreamDataSource", "register", "stream_schema"]


class MillstreamDataSource(DataSource):
    """Spark's entry point for format ``millstream``; Spark hands it the options, case-insensitively."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return stream_schema(parse_bool("raw", self.options.get("raw", "false")))

    def reader(self, schema: StructType) -> DataSourceReader:
        return StreamDataFrameReader(ReadOptions.parse(dict(self.options)))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return StreamDataFrameWriter(WriteOptions.parse(dict(self.options), schema, overwrite))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 - Spark's name
        """The same format read as a Structured Streaming source (:mod:`millstream.spark.sources.streaming_source`,
        imported here because it builds on this module's batch reader)."""
        try:
            from millstream.spark.sources.streaming_source import stream_reader
        except ImportError as error:  # pyspark.sql.streaming.datasource came with pyspark 4.2
            raise MillstreamError(
                f"format '{FORMAT}' as a streaming source needs pyspark 4.2 or newer (read limits and "
                f"Trigger.AvailableNow for Python sources), this is pyspark {pyspark.__version__}: "
                "pip install 'pyspark>=4.2,<5'"
            ) from error

        return stream_reader(dict(self.options))


_registered: weakref.WeakSet[SparkSession] = weakref.WeakSet()
"""Sessions that know the formats already: Spark warns each time a source is registered again."""


def register(spark: SparkSession, *, required: bool = True) -> None:
    """Make formats ``millstream`` and ``millstream-checkpoints`` known to ``spark``, once per session.

    Spark's Python data sources exchange rows as Arrow batches, and without pyarrow a worker fails with a long
    Java stack trace. So without it (``millstream[dataframes]``) a ``required`` registration is refused at once,
    in the driver, with one line naming the extra; the sessions millstream builds for running jobs pass
    ``required=False`` and simply leave the formats out, since running a job needs no Arrow."""
    if spark in _registered:
        return
    missing = missing_module_hint("pyarrow", f"format '{FORMAT}' (streams as DataFrames)")
    if missing is not None:
        if required:
            raise MillstreamError(missing)
        return
    spark.dataSource.register(MillstreamDataSource)
    spark.dataSource.register(MillstreamCheckpointsDataSource)
    _registered.add(spark)
