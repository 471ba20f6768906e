"""``job.startpoints``, ``job.checkpoints`` and ``job.adstores``: where a job starts reading, where it got to,
and the published versions of its adjunct data stores, as the ``millstream startpoint``, ``checkpoint`` and
``adstore`` commands show and change them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from millstream.adjunct.published import PublishedVersion, latest_version, list_versions
from millstream.checkpoint.checkpoint import Checkpoint
from millstream.checkpoint.factory import checkpoint_manager
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig, store_names
from millstream.contracts.startpoints import Startpoint
from millstream.coordinator.services import ServiceScope
from millstream.errors import ConfigError
from millstream.model import SystemStreamPartition, TaskName
from millstream.startpoint.tools import StartpointListing, remove_startpoints, startpoint_listing, write_startpoints

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from millstream.job.streams import StreamName


def _stream_name(stream: StreamName) -> str:
    return str(stream)


class Startpoints:
    """Startpoints move where a job starts reading, per partition, without touching its checkpoints."""

    def __init__(self, config: Settings, scope: ServiceScope | None = None) -> None:
        self._config = config
        self._scope = scope or ServiceScope(config)

    def set(
        self,
        stream: StreamName,
        startpoint: Startpoint,
        *,
        partitions: Iterable[int] | None = None,
        task: str | None = None,
        apply: bool = False,
    ) -> list[SystemStreamPartition]:
        """Write ``startpoint`` for ``partitions`` of ``stream`` (all when None), optionally for one task only;
        the partitions it was written for. It applies when the job next starts, or, with ``apply``, a running
        job restarts its containers gracefully to use it."""
        with self._scope.use() as services:
            return write_startpoints(
                services, _stream_name(stream), startpoint, partitions=partitions, task_name=task, apply=apply
            )

    def show(self) -> StartpointListing:
        """Pending startpoints (stale ones marked), those given to tasks, and those that failed to resolve."""
        with self._scope.use() as services:
            return startpoint_listing(services)

    def clear(
        self,
        stream: StreamName | None = None,
        *,
        partitions: Iterable[int] | None = None,
        task: str | None = None,
        fanned_out: bool = False,
    ) -> int:
        """Delete pending startpoints (all, or of one stream / its partitions / one task); with ``fanned_out``
        those already given to tasks too. How many were deleted."""
        name = None if stream is None else _stream_name(stream)
        with self._scope.use() as services:
            return remove_startpoints(services, name, partitions=partitions, task_name=task, fanned_out=fanned_out)


class Checkpoints:
    """The job's checkpoints: per task, the offset of each partition its next start resumes after."""

    def __init__(self, config: Settings, scope: ServiceScope | None = None) -> None:
        self._config = config
        self._scope = scope or ServiceScope(config)

    def show(self) -> dict[TaskName, Checkpoint]:
        """The last checkpoint of every task (empty before the first commit)."""
        with self._scope.use() as services:
            manager = checkpoint_manager(self._config, services.store(), None)
            manager.start()
            try:
                return manager.read_all()
            finally:
                manager.stop()


class AdjunctStores:
    """Versions of the job's adjunct data stores: bulk-built with Spark, published, switched to by a running job."""

    def __init__(self, config: Settings, scope: ServiceScope | None = None) -> None:
        self._config = config
        self._scope = scope or ServiceScope(config)

    def check(self, store: str) -> None:
        """Refuse (``ConfigError`` naming the key) a store that is not an adjunct store of this job."""
        if store not in store_names(self._config):
            raise ConfigError(f"store '{store}' is not configured (no 'stores.{store}.*' keys)")
        self._config.view(StoreConfig, store).adjunct_input(store)

    def build(
        self,
        spark: SparkSession,
        store: str,
        source: str,
        fmt: str,
        *,
        key_column: str = "key",
        value_column: str | None = None,
    ) -> PublishedVersion:
        """Build a version of ``store`` from a dataset (``fmt``: parquet, json, csv; or ``table`` / ``sql`` with
        a table name or query as ``source``) on ``spark`` and publish it: a running job switches to it."""
        from millstream.spark.builds.adstore_build import build_version

        return build_version(spark, self._config, store, source, fmt, key_column=key_column, value_column=value_column)

    def versions(self, store: str) -> tuple[list[PublishedVersion], PublishedVersion | None]:
        """The published versions still kept (oldest first) and the latest, which jobs serve."""
        self.check(store)
        with self._scope.use() as services:
            metadata = services.store()
            return list_versions(metadata, store), latest_version(metadata, store)

    def end_version(self, store: str, label: str) -> tuple[str, int]:
        """Write an end-of-version marker to every partition of a versioned store's input stream: the version
        written so far is sealed and readers switch to it. The stream and its partition count."""
        from millstream.adjunct.markers import write_end_of_version

        self.check(store)
        settings = self._config.view(StoreConfig, store)
        if not settings.adstore_versioned:
            raise ConfigError(
                f"store '{store}' is not versioned (stores.{store}.adstore.versioned): its readers ignore markers"
            )
        stream = settings.adjunct_input(store)
        with self._scope.use() as services:
            return str(stream), write_end_of_version(services, self._config, stream, label)
