"""``TableProvider``: the remote tables of one container, one instance per table id, built at first use.

The container makes one and hands it to every task's context (``context.get_table``), so the tasks of a
container share each table's rate limiter, cache, reads in flight and batches: the rate limit is per
container, as Samza's is. A table comes from the application (its ``RemoteTable``) or, reached by id
alone, from ``tables.<id>.definition``; its settings are the definition's, overridden by the
``tables.<id>.*`` keys of the job's config. ``close`` (awaited on the container's loop when the container
stops) lets the fetches in flight end and runs each definition's ``close``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from millstream.api.remote_table import RemoteTable
from millstream.config.settings import Settings
from millstream.contracts.metrics import NOOP_METRICS, MetricsRegistry
from millstream.errors import ConfigError
from millstream.plugins import load_object
from millstream.table.remote import RemoteTableInstance
from millstream.table.settings import TableConfig


class TableProvider:
    def __init__(
        self, config: Settings, metrics: MetricsRegistry = NOOP_METRICS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.tables: dict[str, RemoteTableInstance] = {}

    def get(self, table: str | RemoteTable) -> RemoteTableInstance:
        """The container's instance of ``table`` (by id, or its definition; the first definition of an id wins)."""
        table_id = table if isinstance(table, str) else table.table_id
        instance = self.tables.get(table_id)
        if instance is None:
            definition = table if isinstance(table, RemoteTable) else self._definition(table_id)
            overrides = self.config.subset(f"tables.{table_id}.", strip_prefix=False)
            settings = Settings({**definition.settings, **overrides}).view(TableConfig, table_id)
            instance = self.tables[table_id] = RemoteTableInstance(definition, settings, self.metrics, self.clock)
        return instance

    def _definition(self, table_id: str) -> RemoteTable:
        key = f"tables.{table_id}.definition"
        name = self.config.view(TableConfig, table_id).definition
        if name is None:
            raise ConfigError(
                f"remote table '{table_id}' is not defined: set config key '{key}' to the module:name of a "
                "RemoteTable (or of a function of the config returning one)"
            )
        found = load_object(name, key)
        if not isinstance(found, RemoteTable) and callable(found):
            found = found(self.config)
        if not isinstance(found, RemoteTable):
            raise ConfigError(f"config key '{key}': '{name}' is not a RemoteTable (nor returns one): {found!r}")
        if found.table_id != table_id:
            raise ConfigError(f"config key '{key}': '{name}' defines table '{found.table_id}', not '{table_id}'")
        return found

    async def close(self) -> None:
        for instance in self.tables.values():
            await instance.close()
