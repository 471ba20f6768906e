"""Where each task starts reading each of its partitions.

Precedence, as in Samza's OffsetManager: a checkpointed offset resumes *after* itself, unless the
stream is configured with ``reset.offset``; without one, ``offset.default`` (stream-level, else
system-level, else ``upcoming``) applies. A resume point that retention has already trimmed away
falls back to the oldest retained offset, loudly, since the gap is data the job can never see.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set

from millstream.checkpoint.checkpoint import Checkpoint
from millstream.config import Config
from millstream.config.views import offset_default, stream_samza
from millstream.model import SystemStreamPartition, TaskName
from millstream.systems.base import SystemAdmin, SystemStreamPartitionMetadata

log = logging.getLogger(__name__)


class OffsetManager:
    def __init__(self, config: Config, admins: Mapping[str, SystemAdmin]) -> None:
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
        starting: dict[SystemStreamPartition, str] = {}
        by_system: dict[str, dict[SystemStreamPartition, str]] = {}
        for ssp, offset in checkpointed.items():
            by_system.setdefault(ssp.system, {})[ssp] = offset
        for system, offsets in by_system.items():
            starting.update(self.admins[system].offsets_after(offsets))
        for ssp in ssps:
            partition = metadata[ssp]
            if ssp in starting:
                starting[ssp] = self._within_retention(task_name, ssp, starting[ssp], partition)
            elif offset_default(self.config, ssp.system_stream) == "oldest":
                starting[ssp] = partition.oldest_offset or partition.upcoming_offset
            else:
                starting[ssp] = partition.upcoming_offset
        return starting

    def _within_retention(
        self, task_name: TaskName, ssp: SystemStreamPartition, offset: str, partition: SystemStreamPartitionMetadata
    ) -> str:
        oldest = partition.oldest_offset or partition.upcoming_offset
        compare = self.admins[ssp.system].offset_comparator
        if oldest is not None and (order := compare(offset, oldest)) is not None and order < 0:
            log.warning(
                "%s: resume offset %s of %s was trimmed by retention; starting at the oldest offset %s",
                task_name,
                offset,
                ssp,
                oldest,
            )
            return oldest
        return offset
