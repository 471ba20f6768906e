"""Deleting the records a task has checkpointed past, on streams that ask for it.

Samza's ``streams.<id>.samza.delete.committed.messages`` and Kafka Streams' repartition-topic purge
(KIP-284): an intermediate stream is created without retention, so something must delete what its
only reader has consumed, and only once that reader's checkpoint is durable; a crash before the
checkpoint must find the records still there. A failed purge costs disk, not correctness: it is
logged and the next checkpoint purges further.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Set

from millstream.checkpoint.offset_manager import offsets_after
from millstream.config.settings import Settings
from millstream.config.views import StreamSamzaConfig
from millstream.contracts.systems import SystemAdmin
from millstream.model import SystemStreamPartition

log = logging.getLogger(__name__)


class CommittedMessagePurger:
    """One task's purge of its ``delete.committed.messages`` partitions, after each checkpoint it writes."""

    def __init__(
        self, owner: str, ssps: Set[SystemStreamPartition], config: Settings, admins: Mapping[str, SystemAdmin]
    ) -> None:
        self.owner = owner
        self.admins = admins
        self.ssps = {ssp for ssp in ssps if config.view(StreamSamzaConfig, ssp.system_stream).delete_committed_messages}
        self.purged: dict[SystemStreamPartition, str] = {}
        """The checkpointed offset each partition was last purged up to (inclusive)."""

    @classmethod
    def of(
        cls, owner: str, ssps: Set[SystemStreamPartition], config: Settings, admins: Mapping[str, SystemAdmin]
    ) -> CommittedMessagePurger | None:
        """A purger when any of ``ssps`` asks for one, else None (nothing to do after checkpoints)."""
        purger = cls(owner, ssps, config, admins)
        return purger if purger.ssps else None

    def after_checkpoint(self, offsets: Mapping[SystemStreamPartition, str | None]) -> None:
        """Delete each purged partition's records up to and including its checkpointed offset."""
        moved = {
            ssp: offset
            for ssp in self.ssps
            if (offset := offsets.get(ssp)) is not None and self.purged.get(ssp) != offset
        }
        by_system: dict[str, dict[SystemStreamPartition, str]] = {}
        for ssp, offset in moved.items():
            by_system.setdefault(ssp.system, {})[ssp] = offset
        for system, checkpointed in by_system.items():
            self._purge(system, checkpointed)

    def _purge(self, system: str, checkpointed: dict[SystemStreamPartition, str]) -> None:
        admin = self.admins[system]
        try:
            supported = admin.delete_messages(offsets_after(self.admins, checkpointed))
        except Exception as error:  # the records stay until the next checkpoint purges them
            log.warning(
                "%s: could not delete checkpointed records of %s (retried after the next checkpoint): %s: %s",
                self.owner, sorted(ssp.key() for ssp in checkpointed), type(error).__name__, error,
            )  # fmt: skip
            return
        if not supported:
            log.warning(
                "%s: system '%s' cannot delete records: delete.committed.messages has no effect on %s",
                self.owner, system, sorted(ssp.key() for ssp in checkpointed),
            )  # fmt: skip
            self.ssps = {ssp for ssp in self.ssps if ssp.system != system}
            return
        self.purged.update(checkpointed)
        log.debug("%s: deleted records up to %s", self.owner, {ssp.key(): o for ssp, o in checkpointed.items()})
