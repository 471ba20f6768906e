"""Where each task starts reading each of its partitions.

Precedence, as in Samza's OffsetManager: a startpoint (resolved by the system's admin and used as is,
inclusive) > ``reset.offset`` > the checkpointed offset (resumed *after* itself) > ``offset.default``
(stream-level, else system-level, else ``upcoming``). A startpoint the admin cannot resolve is
reported and the job starts from the checkpoint or default instead.

A resume point that retention (or a purge) has already deleted is data the job can never see, so the
task fails naming the stream, partition and lost offsets, unless ``trimmed.offset.policy`` accepts
the loss (start at the ``oldest`` remaining record or the ``upcoming`` one, with a warning). The same
holds for a task that reads an intermediate stream from its start without a checkpoint: when the
stream no longer begins at the system's origin offset, records its producers wrote are gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any, Protocol

from millstream.checkpoint.checkpoint import Checkpoint
from millstream.config.settings import Settings
from millstream.config.views import StreamSamzaConfig
from millstream.contracts.startpoints import Startpoint
from millstream.contracts.systems import SystemStreamPartitionMetadata
from millstream.errors import MillstreamError
from millstream.model import SystemStreamPartition, TaskName

log = logging.getLogger(__name__)


class TrimmedOffsetError(MillstreamError):
    """A task's resume point was deleted from its stream before the task read it."""

    def __init__(self, owner: str, ssp: SystemStreamPartition, wanted: str, oldest: str, why: str) -> None:
        self.ssp = ssp
        self.wanted = wanted
        self.oldest = oldest
        key = f"systems.{ssp.system}.streams.{ssp.stream}.samza.trimmed.offset.policy"
        super().__init__(
            f"{owner}: stream '{ssp.system}.{ssp.stream}' partition {ssp.partition}: {why}, but offsets "
            f"{wanted} up to {oldest} (exclusive) were already deleted; the oldest available offset is {oldest}. "
            f"Starting later would silently skip those records: to accept the loss, set {key} to 'oldest' or "
            f"'upcoming'"
        )


class OffsetAdmin(Protocol):
    """What offsets need of a system's admin (``SystemAdmin``): offsets are the system's own strings, so
    only it can order them, step past one, or say where a startpoint points."""

    def offsets_after(self, offsets: Mapping[SystemStreamPartition, str]) -> dict[SystemStreamPartition, str]: ...

    def offset_comparator(self, offset1: str, offset2: str) -> int | None: ...

    def resolve_startpoint(self, ssp: SystemStreamPartition, startpoint: Startpoint) -> str: ...

    @property
    def origin_offset(self) -> str | None:
        """Where the system numbers a partition's first record from, if it has a fixed origin."""


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
    def __init__(self, config: Settings, admins: Mapping[str, OffsetAdmin]) -> None:
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
            if ssp in ssps
            and offset is not None
            and not self.config.view(StreamSamzaConfig, ssp.system_stream).reset_offset
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
                starting[ssp] = self._available(owner, ssp, resume[ssp], partition, "resuming after its checkpoint")
            elif self.config.view(StreamSamzaConfig, ssp.system_stream).intermediate:
                starting[ssp] = self._intermediate_start(owner, ssp, partition)
            elif self.config.offset_default(ssp.system_stream) == "oldest":
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

    def _intermediate_start(
        self, owner: str, ssp: SystemStreamPartition, partition: SystemStreamPartitionMetadata
    ) -> str:
        """An intermediate stream is read from its first record ever: from the system's origin where it
        has one (so a head deleted by retention or an earlier reader's purge is found), else the oldest."""
        origin = self.admins[ssp.system].origin_offset
        if origin is None:
            return partition.oldest_offset or partition.upcoming_offset
        return self._available(owner, ssp, origin, partition, "reading the intermediate stream from its start")

    def _available(
        self, owner: str, ssp: SystemStreamPartition, offset: str, partition: SystemStreamPartitionMetadata, why: str
    ) -> str:
        """``offset``, unless it was deleted: then fail, or apply ``trimmed.offset.policy``."""
        oldest = partition.oldest_offset or partition.upcoming_offset
        order = self.admins[ssp.system].offset_comparator(offset, oldest)
        if order is None or order >= 0:
            return offset
        policy = self.config.trimmed_offset_policy(ssp.system_stream)
        if policy == "fail":
            raise TrimmedOffsetError(owner, ssp, offset, oldest, why)
        start = oldest if policy == "oldest" else partition.upcoming_offset
        log.warning(
            "%s: %s of %s needs offset %s, but offsets below %s were deleted; trimmed.offset.policy=%s: starting at %s",
            owner, why, ssp, offset, oldest, policy, start,
        )  # fmt: skip
        return start
