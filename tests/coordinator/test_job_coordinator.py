"""Publishing a generation fences the previous generation's writers in every system, with its containers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.prepare import prepare
from millstream.embedded.log.admin import LogSystemAdmin
from tests.helpers import create_stream, job_config


def test_publishing_a_generation_fences_every_container_of_the_previous_one_in_every_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fenced: list[tuple[str, list[str]]] = []

    def record(_admin: LogSystemAdmin, job: str, container_ids: Iterable[str]) -> None:
        fenced.append((job, list(container_ids)))

    monkeypatch.setattr(LogSystemAdmin, "fence_writers", record)
    two = prepare(job_config(tmp_path, job__container__count=2))
    create_stream(two, "in", 2)
    with metadata_store(two) as store:
        JobCoordinator(two, store).start()
        assert fenced == []  # nothing ran before the first generation
        JobCoordinator(prepare(job_config(tmp_path, job__container__count=1)), store).start()
    assert fenced == [("test-1", ["0", "1"])]  # the previous generation's containers, not the new one's


def test_planning_a_stateful_job_reads_partition_counts_and_no_partitions_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The input and the changelog cost one ``stream.json`` read each, however many partitions they have (reading
    every partition's offsets opened 3,000 partition files for 1,000 partitions)."""
    config = prepare(
        job_config(
            tmp_path,
            stores__counts__factory="rocksdb",
            stores__counts__changelog="log.counts-changelog",
            stores__counts__key__serde="string",
            stores__counts__msg__serde="json",
        )
    )
    create_stream(config, "in", 3)
    offsets_read: list[list[str]] = []

    def refuse(_admin: LogSystemAdmin, streams: Iterable[str]) -> dict[str, object]:
        offsets_read.append(list(streams))
        return {}

    monkeypatch.setattr(LogSystemAdmin, "get_system_stream_metadata", refuse)
    with metadata_store(config) as store:
        model = JobCoordinator(config, store).start()
    assert offsets_read == []
    assert sorted(ssp.partition for task in model.tasks.values() for ssp in task.ssps) == [0, 1, 2]
    with system_factory(config, "log").get_admin("log", config) as admin:
        assert admin.partition_counts(["counts-changelog", "in", "absent"]) == {"counts-changelog": 3, "in": 3}
