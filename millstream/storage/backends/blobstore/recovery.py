"""What a start does when blobs its checkpoint names are gone from the blob store (deleted by hand, by a
lifecycle rule, by a bug elsewhere).

Without its snapshot index a snapshot cannot be restored at all, and without one of its files it cannot
be restored whole. Failing forever would leave the job stuck on a checkpoint it can never restore, so by
default (``blob.store.restore.recover.missing.blobs.enabled``, as Samza does) the task goes on with
what remains: the local checkpoint directory of that very checkpoint when the host still has it, else an
empty store. It then commits at once: a new snapshot (every file uploaded again, under a new
CheckpointId) in a new checkpoint that keeps the old input offsets, so processing resumes where it was
and the next restart no longer depends on the lost blobs. What the lost snapshot held and the local copy
does not is lost for good: a warning names every missing blob. With recovery off the start fails naming
them instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from millstream.checkpoint.checkpoint import CheckpointV2
from millstream.config.settings import Settings
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.storage.errors import StateRestoreError
from millstream.storage.layout import checkpoint_dir, read_checkpoint_file

log = logging.getLogger(__name__)

RECOVER_KEY = "blob.store.restore.recover.missing.blobs.enabled"


def recovery_enabled(config: Settings) -> bool:
    return config.view(BlobStoreConfig).restore_recover_missing_blobs


def blob_names(blob_ids: Iterable[str]) -> str:
    return ", ".join(f"'{blob_id}'" for blob_id in sorted(set(blob_ids)))


def report_missing(enabled: bool, message: str, consequence: str) -> None:
    """Warn (recovery on) or fail (off) with ``message``, which names every missing blob."""
    if not enabled:
        raise StateRestoreError(f"{message} (not recovered: {RECOVER_KEY} is false)")
    log.warning("%s: %s; a new snapshot is checkpointed at once (%s)", message, consequence, RECOVER_KEY)


def local_checkpoint_of(store_dir: Path, checkpoint: CheckpointV2, marker_key: str, store: str) -> Path | None:
    """The local checkpoint directory of ``checkpoint`` for ``store``, when the host still has it whole:
    its ``CHECKPOINT-V2`` file (written only once the directory was complete and uploaded) records this
    very checkpoint and the same snapshot index. Without the index it cannot be compared file by file."""
    local = checkpoint_dir(store_dir, checkpoint.checkpoint_id)
    if not local.is_dir():
        return None
    recorded = read_checkpoint_file(local)
    if recorded is None or recorded.checkpoint_id != checkpoint.checkpoint_id:
        return None
    expected = checkpoint.state_checkpoint_markers.get(marker_key, {}).get(store)
    if expected is None or recorded.state_checkpoint_markers.get(marker_key, {}).get(store) != expected:
        return None
    return local
