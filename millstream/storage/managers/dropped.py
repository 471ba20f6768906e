"""What backends still keep for stores a task's config no longer backs up with them.

Each backend the task's last checkpoint has markers of, or that backs up one of its stores now, is
asked what it keeps for the other stores (the blob store keeps their snapshots). That is deleted after
the first checkpoint this start writes is durable — not at start: until that checkpoint, the last one
still names those snapshots, and a restart with the old config (a rollback) must find them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from millstream.checkpoint.checkpoint import Checkpoint, CheckpointId, CheckpointV2
from millstream.config.settings import Settings
from millstream.errors import MillstreamError
from millstream.model import TaskName
from millstream.storage.backends.base import DroppedStores, StateBackendFactory
from millstream.storage.backends.registry import builtin_factory_for_marker

log = logging.getLogger(__name__)

FactoryOf = Callable[[type[StateBackendFactory]], StateBackendFactory]


class DroppedStoreSweep:
    def __init__(self, task_name: TaskName, resumed_from: CheckpointId | None, pending: list[DroppedStores]) -> None:
        self.task_name = task_name
        self.resumed_from = resumed_from
        self.pending = pending

    @classmethod
    def find(
        cls,
        config: Settings,
        task_name: TaskName,
        checkpoint: Checkpoint | None,
        backups: Mapping[str, tuple[type[StateBackendFactory], ...]],
        factory_of: FactoryOf,
    ) -> DroppedStoreSweep:
        """``backups``: every store of the task → the backends that back it up now."""
        candidates = {c.marker_key(): c for classes in backups.values() for c in classes}
        if isinstance(checkpoint, CheckpointV2):
            for key in checkpoint.state_checkpoint_markers:
                if key not in candidates and (builtin := builtin_factory_for_marker(key)) is not None:
                    candidates[key] = builtin
        pending: list[DroppedStores] = []
        for key, factory_class in candidates.items():
            backed_up = frozenset(
                store for store, classes in backups.items() if any(c.marker_key() == key for c in classes)
            )
            dropped = factory_of(factory_class).dropped_stores(config, task_name, backed_up)
            if dropped is None:
                continue
            try:
                stores = dropped.find(checkpoint)
            except MillstreamError as error:  # garbage left behind must not stop the task
                log.warning("task '%s': cannot look for stores %s no longer backs up: %s", task_name, key, error)
                continue
            if stores:
                log.info(
                    "task '%s': %s no longer backs up store(s) %s: what it keeps of them is deleted once the "
                    "next checkpoint is durable", task_name, key, ", ".join(stores),
                )  # fmt: skip
                pending.append(dropped)
        return cls(task_name, checkpoint.checkpoint_id if isinstance(checkpoint, CheckpointV2) else None, pending)

    def after_checkpoint(self, checkpoint_id: CheckpointId) -> None:
        """Called with every durable checkpoint: the first one this start wrote deletes what was found."""
        if not self.pending or checkpoint_id == self.resumed_from:
            return
        failed: list[DroppedStores] = []
        for dropped in self.pending:
            try:
                dropped.delete()
            except MillstreamError as error:  # retried after the next checkpoint
                log.warning("task '%s': deleting what dropped stores left failed (retried): %s", self.task_name, error)
                failed.append(dropped)
        self.pending = failed
