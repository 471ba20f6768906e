"""Where each task starts reading each of its partitions.

Precedence, as in Samza's OffsetManager: a startpoint (resolved by the system's admin and used as is,
inclusive) > ``reset.offset`` > the checkpointed offset (resumed *after* itself) > ``offset.default``
(stream-level, else system-level, else ``upcoming``). A startpoint the admin cannot resolve is
reported and the job starts from the checkpoint or default instead. A resume point that retention
has already trimmed away falls back to the oldest retained offset, loudly: that gap is data the job
can never see.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Protocol

from millstream.checkpoint.checkpoint import Checkpoint
from millstream.config import Config
from millstream.config.views import offset_default, stream_samza
from millstream.model import SystemStreamPartition, TaskName
from millstream.systems.base import SystemStreamPartitionMetadata
from millstream.systems.startpoints import Startpoint

log = logging.getLogger(__name__)


class OffsetAdmin(Protocol):
    """What offsets need of a system's admin (``SystemAdmin``): offsets are the system's own strings, so
    only it can order them, step past one, or say where a startpoint points."""

    def offsets_after(self, offsets: Mapping[SystemStreamPartition, str]) -> dict[SystemStreamPartition, str]: ...

    def offset_comparator(self, offset1: str, offset2: str) -> int | None: ...

    def resolve_startpoint(self, ssp: SystemStreamPartition, startpoint: Startpoint) -> str: ...


@dataclass(frozen=True)
class StartpointResolution:
    offsets: dict[SystemStreamPartition, str]
    """Starting offsets with the applied startpoints."""
    applied: dict[SystemStreamPartition, str]
    failures: dict[SystemStreamPartition, str]


def offsets_after(
    admins: Mapping[str, OffsetAdmin], offsets: Mapping[SystemStreamPartition, str]
) -> dict[SystemStreamPartition, str]:
    """The offset following each given one (where to resume after it), asking each partition's system."""
    by_system: dict[str, dict[SystemStreamPartition, str]] = {}
    for ssp, offset in offsets.items():
        by_system.setdefault(ssp.system, {})[ssp] = offset
    following: dict[SystemStreamPartition, str] = {}
    for system, system_offsets in by_system.items():
        following.update(admins[system].offsets_after(system_offsets))
    return following


def keep_earliest(
    registered: dict[SystemStreamPartition, str],
    starts: Mapping[SystemStreamPartition, str],
    admins: Mapping[str, OffsetAdmin],
) -> None:
    """Merge ``starts`` into ``registered``, keeping the earlier offset of a partition read from several
    starts (a broadcast partition, an adjunct partition feeding two stores): one consumer serves them all."""
    for ssp, offset in starts.items():
        current = registered.get(ssp)
        order = None if current is None else admins[ssp.system].offset_comparator(offset, current)
        if current is None or (order is not None and order < 0):
            registered[ssp] = offset


def count_before(envelopes: Sequence[Any], start: str, compare: Callable[[str, str], int | None]) -> int:
    """How many leading envelopes precede ``start``: what a reader that starts later than its shared
    consumer skips."""
    for index, envelope in enumerate(envelopes):
        order = compare(envelope.offset, start)
        if order is None or order >= 0:
            return index
    return len(envelopes)


class OffsetManager:
    def __init__(self, config: Config, admins: Mapping[str, OffsetAdmin]) -> None:
        self.config = config
        self.admins = admins

    def starting_offsets(
        self,
        task_name: TaskName,
        ssps: Set[SystemStreamPartition],
        checkpoint: Checkpoint | None,
        metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata],
    ) -> dict[SystemStreamPartition, str]:
        checkpointed = {
            ssp: offset
            for ssp, offset in (checkpoint.offsets.items() if checkpoint else ())
            if ssp in ssps and offset is not None and not stream_samza(self.config, ssp.system_stream).reset_offset
        }
        return self.resume_or_default(task_name, ssps, offsets_after(self.admins, checkpointed), metadata)

    def resume_or_default(
        self,
        owner: str,
        ssps: Set[SystemStreamPartition],
        resume: Mapping[SystemStreamPartition, str],
        metadata: Mapping[SystemStreamPartition, SystemStreamPartitionMetadata],
    ) -> dict[SystemStreamPartition, str]:
        """Each partition at its resume offset (moved to the oldest, loudly, when retention trimmed it),
        else at the stream's ``offset.default``."""
        starting: dict[SystemStreamPartition, str] = {}
        for ssp in ssps:
            partition = metadata[ssp]
            if ssp in resume:
                starting[ssp] = self._within_retention(owner, ssp, resume[ssp], partition)
            elif offset_default(self.config, ssp.system_stream) == "oldest":
                starting[ssp] = partition.oldest_offset or partition.upcoming_offset
            else:
                starting[ssp] = partition.upcoming_offset
        return starting

    def apply_startpoints(
        self,
        task_name: TaskName,
        offsets: Mapping[SystemStreamPartition, str],
        startpoints: Mapping[SystemStreamPartition, Startpoint],
    ) -> StartpointResolution:
        """Override ``offsets`` with every startpoint of this task that resolves; collect the failures."""
        resolved = dict(offsets)
        applied: dict[SystemStreamPartition, str] = {}
        failures: dict[SystemStreamPartition, str] = {}
        for ssp, startpoint in startpoints.items():
            if ssp not in offsets:
                continue
            try:
                offset = self.admins[ssp.system].resolve_startpoint(ssp, startpoint)
            except Exception as error:  # any system failure falls back to the checkpoint, loudly
                failures[ssp] = f"{type(error).__name__}: {error}"
                log.error(
                    "%s: cannot apply startpoint %s to %s, starting from %s instead: %s",
                    task_name, startpoint.describe(), ssp, offsets[ssp], error,
                )  # fmt: skip
                continue
            if not offset:
                failures[ssp] = "the system resolved it to no offset"
                continue
            log.info("%s: startpoint %s of %s resolved to offset %s", task_name, startpoint.describe(), ssp, offset)
            resolved[ssp] = applied[ssp] = offset
        return StartpointResolution(resolved, applied, failures)

    def _within_retention(
        self, owner: str, ssp: SystemStreamPartition, offset: str, partition: SystemStreamPartitionMetadata
    ) -> str:
        oldest = partition.oldest_offset or partition.upcoming_offset
        compare = self.admins[ssp.system].offset_comparator
        if oldest is not None and (order := compare(offset, oldest)) is not None and order < 0:
            log.warning(
                "%s: resume offset %s of %s was trimmed by retention; starting at the oldest offset %s",
                owner,
                offset,
                ssp,
                oldest,
            )
            return oldest
        return offset
