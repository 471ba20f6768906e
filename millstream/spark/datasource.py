"""Public path of format ``millstream`` (``millstream.spark.datasource.register(spark)``).

The format lives in :mod:`millstream.spark.sources.datasource`; this module re-exports what users call, so
the documented import keeps working whatever the package layout."""

from millstream.spark.sources.datasource import FORMAT, MillstreamDataSource, register, stream_schema

__all__ = ["FORMAT", "MillstreamDataSource", "register", "stream_schema"]
