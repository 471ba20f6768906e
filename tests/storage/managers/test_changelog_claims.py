"""A container claims every task's changelog partitions on its own thread, one after the other, then reads their
offsets in one call, before any task's restore starts: fencing still precedes every read of a changelog's end, the
claims' opens of partition files run back to back instead of queueing on the producer's lock from the restore
threads, and the restores ask nothing more about their changelogs' ends (issue 40)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

from millstream.contracts.systems import SystemStreamPartitionMetadata
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.model import SystemStreamPartition
from millstream.storage.managers.stores import TaskStorageManager
from millstream.systems.producers import SerializedProducer
from tests.storage.harness import StateHarness, state_config

TASKS = 4


def test_every_tasks_changelog_is_claimed_then_described_at_once_on_the_containers_thread_before_any_restore(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog"), partitions=TASKS)
    events: list[tuple[str, object, str]] = []
    claim, describe = SerializedProducer.claim, SerializedProducer.describe
    claim_directories = TaskStorageManager.claim_directories

    def recording_claim(producer: SerializedProducer, ssp: SystemStreamPartition) -> None:
        events.append(("claim", ssp, threading.current_thread().name))
        claim(producer, ssp)

    def recording_describe(
        producer: SerializedProducer, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        asked = list(ssps)
        events.append(("describe", asked, threading.current_thread().name))
        return describe(producer, asked)

    def recording_restore_start(storage: TaskStorageManager) -> None:
        events.append(("restore", storage.task_name, threading.current_thread().name))
        claim_directories(storage)

    monkeypatch.setattr(SerializedProducer, "claim", recording_claim)
    monkeypatch.setattr(SerializedProducer, "describe", recording_describe)
    monkeypatch.setattr(TaskStorageManager, "claim_directories", recording_restore_start)
    with harness.open_every_task() as every:
        every.restore()

    kinds = [kind for kind, _, _ in events]
    assert kinds == ["claim"] * TASKS + ["describe"] + ["restore"] * TASKS, events
    claimed = [ssp for kind, ssp, _ in events if kind == "claim"]
    assert sorted(ssp.partition for ssp in claimed if isinstance(ssp, SystemStreamPartition)) == list(range(TASKS))
    assert events[TASKS][1] == claimed, "the one describe asks about every claimed partition"
    here = threading.current_thread().name
    assert {thread for kind, _, thread in events if kind != "restore"} == {here}
    assert all(thread.startswith("restore") for kind, _, thread in events if kind == "restore")


def test_changelogs_the_producer_cannot_describe_are_asked_of_the_admin_in_one_call_for_every_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's producer holds nothing to answer from: its admin is asked about every task's changelog at once,
    one request where each task's restore asked about its own."""
    harness = StateHarness(state_config(tmp_path, "changelog"), partitions=TASKS)
    get_ssp_metadata = LogSystemAdmin.get_ssp_metadata
    asked: list[list[SystemStreamPartition]] = []

    def describes_nothing(
        producer: SerializedProducer, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        return {}

    def recording_get_ssp_metadata(
        self: object, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        ssps = list(ssps)
        if any(ssp.stream.endswith("changelog") for ssp in ssps):
            asked.append(ssps)
        return get_ssp_metadata(self, ssps)  # type: ignore[arg-type]

    monkeypatch.setattr(SerializedProducer, "describe", describes_nothing)
    monkeypatch.setattr(LogSystemAdmin, "get_ssp_metadata", recording_get_ssp_metadata)
    with harness.open_every_task() as every:
        every.restore()
        restored_by = [storage.restored_by["counts"] for storage in every.storages.values()]

    assert [sorted(ssp.partition for ssp in call) for call in asked] == [list(range(TASKS))]
    assert len(restored_by) == TASKS
    assert all(backend.endswith("ChangelogStateBackendFactory") for backend in restored_by)
