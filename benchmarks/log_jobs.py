"""Jobs the benchmarks run over the embedded log under one scratch root: their config and output stream."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.prepare import prepare
from millstream.embedded.log.factory import LogSystemFactory


def log_job_config(
    root: Path, run: str, task: str, *, containers: int = 1, extra: Mapping[str, Any] | None = None
) -> Config:
    """A job ``bench-<run>`` reading ``log.bench`` from its start, its log and data under ``root``;
    ``extra`` overrides or adds keys (``{"task.inputs": ...}``)."""
    values: dict[str, Any] = {
        "job.name": f"bench-{run}",
        "job.data.dir": str(root / "data"),
        "job.container.count": containers,
        "systems.log.path": str(root / "log"),
        "systems.log.samza.offset.default": "oldest",
        "task.class": task,
        "task.inputs": "log.bench",
        "task.commit.ms": 10_000,
    }
    values.update(extra or {})
    return prepare(Settings(values))


def reset_output(root: Path, partitions: int) -> None:
    """An empty ``log.bench-out`` for the next run."""
    admin = LogSystemFactory().get_admin("log", Settings({"systems.log.path": str(root / "log")}))
    admin.clear_stream(StreamSpec("log", "bench-out"))
    admin.create_stream(StreamSpec("log", "bench-out", partitions))
