"""Public path of format ``millstream-store`` (``millstream.spark.store_datasource.register(spark)``).

The format lives in :mod:`millstream.spark.sources.store_datasource`; this module re-exports what users
call, so the documented import keeps working whatever the package layout."""

from millstream.spark.sources.store_datasource import FORMAT, MillstreamStoreDataSource, register, store_schema

__all__ = ["FORMAT", "MillstreamStoreDataSource", "register", "store_schema"]
