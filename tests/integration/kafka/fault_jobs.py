"""Jobs of the network-fault tests, importable by Spark workers as ``tests.integration.kafka.fault_jobs:<Name>``."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from millstream import TaskContext
from millstream.connectors.kafka.admin import KafkaSystemAdmin
from tests.integration.kafka.jobs import KafkaCountPerKey

LISTING_OFFSETS = "listing-offsets"
"""Written (holding the pid) when the paused commit's snapshot has read the changelog's topic metadata."""
BLACK_HOLED = "black-holed"
"""Written by the test once the broker is black-holed: the snapshot goes on to its ListOffsets requests."""
HOLD_S = 120.0


class CountPerKeyHeldBeforeListOffsets(KafkaCountPerKey):
    """``KafkaCountPerKey`` whose commit paused at ``before-snapshot`` (``task.commit.testing.marker.dir``) stops
    once more inside its snapshot, after it read the changelog ``test.changelog``'s metadata and before it lists
    its offsets, until ``<marker dir>/black-holed`` exists. A black hole begun then meets the ListOffsets
    requests alone, as in issue 37 (librdkafka answers offset -1001). Once per job, like the pause."""

    def init(self, context: TaskContext) -> None:
        super().init(context)
        marker_dir = Path(context.config["task.commit.testing.marker.dir"])
        hold_before_list_offsets(marker_dir, context.config["test.changelog"])


_HOLDS: dict[str, Path] = {}
"""Changelog topic → marker directory of each job this process held or holds: Spark reuses its Python workers
across jobs, and the patch, made once per process, serves every one of them."""


def hold_before_list_offsets(marker_dir: Path, changelog: str) -> None:
    """Patch this process's ``KafkaSystemAdmin._list_offsets`` (once) to hold the paused commit's snapshot just
    before its ListOffsets requests go out (the admin knows the changelog's partitions from earlier commits)."""
    _HOLDS[changelog] = marker_dir
    original = KafkaSystemAdmin._list_offsets
    if getattr(original, "held_before_list_offsets", False):
        return

    def list_offsets(admin: KafkaSystemAdmin, specs: Mapping[Any, Any], *args: Any, **kwargs: Any) -> Any:
        topics = sorted({tp.topic for tp in specs})
        held = _HOLDS.get(topics[0]) if len(topics) == 1 else None
        if held is not None and _paused(held) and _take_once(held / LISTING_OFFSETS):
            deadline = time.monotonic() + HOLD_S
            while not (held / BLACK_HOLED).exists() and time.monotonic() < deadline:
                time.sleep(0.02)  # the job under test is held, not the test
        return original(admin, specs, *args, **kwargs)

    list_offsets.held_before_list_offsets = True  # type: ignore[attr-defined]
    setattr(KafkaSystemAdmin, "_list_offsets", list_offsets)  # noqa: B010 - a patch, for this process


def _paused(marker_dir: Path) -> bool:
    """Whether a commit claimed the ``before-snapshot`` pause (the marker then holds its pid)."""
    try:
        return (marker_dir / "before-snapshot").read_text().strip().isdigit()
    except FileNotFoundError:
        return False


def _take_once(marker: Path) -> bool:
    try:
        descriptor = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(descriptor, str(os.getpid()).encode())
    os.close(descriptor)
    return True
