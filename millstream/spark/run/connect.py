"""Spark Connect client sessions (``sc://host:port``): what Databricks serverless and shared clusters offer
instead of a driver in this process.

Through Connect there is no ``sparkContext`` and no RDD: whatever millstream runs through such a session
(formats ``millstream``, ``millstream-checkpoints`` and ``millstream-store``, ``millstream adstore build``)
uses DataFrame operations only, and its Python code runs in the server's Python workers, which must import
millstream.
"""

from __future__ import annotations

from typing import cast

from pyspark.sql import SparkSession

from millstream.errors import ConfigError
from millstream.spark.sources.datasource import register as register_data_sources
from millstream.spark.sources.store_datasource import register as register_store_source


def remote_session(url: str) -> SparkSession:
    """A Spark Connect session on ``url`` with millstream's formats registered.

    Built with the Connect client's own builder: pyspark's generic builder would switch the whole process
    to Connect mode (its ``pyspark.sql.functions`` would then build Connect columns), which a process that
    also holds a classic session cannot afford."""
    if not url.startswith("sc://"):
        raise ConfigError(f"Spark Connect URL '{url}' must start with sc:// (e.g. sc://localhost:15002)")
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    session = cast(SparkSession, RemoteSparkSession.builder.remote(url).getOrCreate())
    register_data_sources(session)
    register_store_source(session)
    return session


def is_connect(spark: SparkSession) -> bool:
    """Whether ``spark`` is a Spark Connect client (no JVM in this process, no ``sparkContext``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
