"""What a container reads at start-up does not grow in round trips with its tasks: startpoint fan-outs and the
startpoint failures shown are read in one query each for all tasks, however many partitions the job reads; the
embedded log's input partitions are opened once, by the consumer that reads their offsets and then reads them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, ClassVar

import pytest

from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.startpoints import StartpointSpecific
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.sqlite import SqliteMetadataStore, SqliteMetadataStoreFactory
from millstream.model import SystemStreamPartition
from millstream.startpoint.manager import FAN_OUT_NAMESPACE, STARTPOINT_STATUS_NAMESPACE
from millstream.startpoint.tools import set_startpoints
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal

PARTITIONS = 64


class CountingStore(SqliteMetadataStore):
    """Counts reads by kind and namespace, for every connection of the process."""

    reads: ClassVar[Counter[tuple[str, str]]] = Counter()

    def get(self, namespace: str, key: str) -> bytes | None:
        CountingStore.reads["get", namespace] += 1
        return super().get(namespace, key)

    def all(self, namespace: str) -> dict[str, bytes]:
        CountingStore.reads["all", namespace] += 1
        return super().all(namespace)


class CountingStoreFactory(SqliteMetadataStoreFactory):
    def get_metadata_store(self, config: Settings) -> MetadataStore:
        store = super().get_metadata_store(config)
        assert isinstance(store, SqliteMetadataStore)
        store.__class__ = CountingStore
        return store


def test_a_container_reads_every_tasks_startpoints_in_one_query_and_applies_each(tmp_path):
    config = job_config(tmp_path, job__container__count=2, metadata__store__factory=f"{__name__}:CountingStoreFactory")
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", 4)
    written = fill(config, "in", PARTITIONS, 5)
    seal(config, "in")
    set_startpoints(config, "log.in", StartpointSpecific("2"), partitions=[3])
    CountingStore.reads.clear()

    result = InProcessRunner(config).run(timeout=120)

    assert result.outcome == "finished", result.error
    skipped = {(3, 0), (3, 1)}  # partition 3 started at offset 2
    origins = output_origins(config)
    assert len(origins) == len(written) - len(skipped)
    assert set(origins) == written - skipped
    reads = CountingStore.reads
    # only the one task with a startpoint reads its own fan-out: the driver merging into it, the removal after
    # the commit that applied it (one query per task at start would be 64)
    assert reads["get", FAN_OUT_NAMESPACE] <= 2
    assert reads["get", STARTPOINT_STATUS_NAMESPACE] == 0
    assert reads["all", FAN_OUT_NAMESPACE] <= 2 + 1  # one per container, and the driver's own fan-out
    assert reads["all", STARTPOINT_STATUS_NAMESPACE] == 2


def test_a_container_asks_its_log_consumer_not_the_admin_for_its_input_offsets_so_each_file_opens_once(
    tmp_path, monkeypatch: pytest.MonkeyPatch
):
    config = job_config(tmp_path, job__container__count=2)
    create_stream(config, "in", 8)
    create_stream(config, "out", 4)
    written = fill(config, "in", 8, 5)
    seal(config, "in")
    asked: Counter[str] = Counter()
    described: Counter[SystemStreamPartition] = Counter()
    admin_metadata, describe = LogSystemAdmin.get_ssp_metadata, LogSystemConsumer.describe

    def counted_admin(self: LogSystemAdmin, ssps: Iterable[SystemStreamPartition]) -> Any:
        ssps = list(ssps)
        asked.update(ssp.stream for ssp in ssps)
        return admin_metadata(self, ssps)

    def counted_describe(self: LogSystemConsumer, ssps: Iterable[SystemStreamPartition]) -> Any:
        ssps = list(ssps)
        described.update(ssps)
        return describe(self, ssps)

    monkeypatch.setattr(LogSystemAdmin, "get_ssp_metadata", counted_admin)
    monkeypatch.setattr(LogSystemConsumer, "describe", counted_describe)

    result = InProcessRunner(config).run(timeout=120)

    assert result.outcome == "finished", result.error
    assert set(output_origins(config)) == written
    assert described == Counter({SystemStreamPartition("log", "in", partition): 1 for partition in range(8)})
    assert asked["in"] == 0, "a container asked the admin about its input partitions as well"
