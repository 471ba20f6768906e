"""Publishing a generation fences the previous generation's writers in every system, with its containers."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from millstream.composition.metadata import metadata_store
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
