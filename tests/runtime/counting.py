"""Counting seams around the embedded log and the SQLite metadata store, registered by config
(``systems.<s>.samza.factory``, ``metadata.store.factory``): what a container opens, counted in this process
(the class counters) and, when ``test.count.file`` is set, appended to that file with the process id (for
containers that run in Spark's Python workers)."""

from __future__ import annotations

import os
from collections import Counter
from typing import ClassVar

from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import SystemProducer
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.sqlite import SqliteMetadataStoreFactory

COUNT_FILE_KEY = "test.count.file"


def record(config: Settings, what: str) -> None:
    path = config.get(COUNT_FILE_KEY)
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(f"{os.getpid()} {what}\n")


class CountingLogFactory(LogSystemFactory):
    """The embedded log, counting the admins and producers built through it (per system)."""

    admins: ClassVar[Counter[str]] = Counter()
    producers: ClassVar[list[SystemProducer]] = []

    def get_admin(self, system_name: str, config: Settings) -> LogSystemAdmin:
        CountingLogFactory.admins[system_name] += 1
        record(config, f"admin {system_name}")
        return super().get_admin(system_name, config)

    def get_producer(self, system_name: str, config: Settings) -> LogSystemProducer:
        producer = super().get_producer(system_name, config)
        CountingLogFactory.producers.append(producer)
        return producer


class CountingSqliteFactory(SqliteMetadataStoreFactory):
    """The SQLite metadata store, counting the connections opened."""

    opened: ClassVar[int] = 0

    def get_metadata_store(self, config: Settings) -> MetadataStore:
        CountingSqliteFactory.opened += 1
        record(config, "store")
        return super().get_metadata_store(config)


def reset() -> None:
    CountingLogFactory.admins.clear()
    CountingLogFactory.producers.clear()
    CountingSqliteFactory.opened = 0
