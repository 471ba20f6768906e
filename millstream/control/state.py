"""Where a task keeps its reconciliation state between runs: the metadata store, ``control-state/<task>``.

Samza rebuilt control state from messages re-read after the last checkpoint, so a downstream task
restarted after committing past some producers' end-of-stream waited for them forever. millstream
writes the state at every commit, after the task's output was flushed and before its checkpoint
(``CheckpointListener.before_checkpoint``): the stored state is never older than the checkpoint, and
what it covers beyond the checkpoint is exactly what a restart replays — which reconciliation absorbs
(see ``reconciliation``). Writes are fenced like checkpoints (generation and container attempt), so a
zombie container cannot overwrite the state of the attempt that replaced it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

from millstream.contracts.metadata import FencedError, MetadataStore
from millstream.control.errors import ControlStateError

CONTROL_STATE_NAMESPACE = "control-state"
STATE_FORMAT_VERSION = 1


class ControlStateStore:
    """Load and save one task's snapshot (a msgpack document) in the metadata store."""

    def __init__(
        self,
        store: MetadataStore,
        task_name: str,
        fence: Mapping[tuple[str, str], bytes | None] | None = None,
    ) -> None:
        self.store = store
        self.task_name = str(task_name)
        self.fence = dict(fence) if fence is not None else None
        self.writes = 0
        self.bytes_written = 0

    def load(self) -> dict[str, Any] | None:
        raw = self.store.get(CONTROL_STATE_NAMESPACE, self.task_name)
        if raw is None:
            return None
        try:
            document = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except (msgpack.UnpackException, ValueError, TypeError) as error:
            raise ControlStateError(
                f"control state of task '{self.task_name}' ({CONTROL_STATE_NAMESPACE}/{self.task_name}) "
                f"is unreadable: {error}"
            ) from None
        if not isinstance(document, dict) or document.get("format") != STATE_FORMAT_VERSION:
            raise ControlStateError(
                f"control state of task '{self.task_name}' has an unknown format "
                f"{document.get('format') if isinstance(document, dict) else type(document).__name__!r}"
            )
        return document

    def save(self, snapshot: Mapping[str, Any]) -> None:
        """Durably replace the task's state; raises ``FencedError`` when this writer was fenced off."""
        data = msgpack.packb({**snapshot, "format": STATE_FORMAT_VERSION}, use_bin_type=True)
        if self.fence is None:
            self.store.put(CONTROL_STATE_NAMESPACE, self.task_name, data)
        elif not self.store.compare_and_put(CONTROL_STATE_NAMESPACE, self.task_name, data, self.fence):
            raise FencedError(
                f"task '{self.task_name}': control state write refused — a newer generation or container "
                "attempt owns this task"
            )
        self.store.flush()
        self.writes += 1
        self.bytes_written += len(data)

    def delete(self) -> None:
        self.store.delete(CONTROL_STATE_NAMESPACE, self.task_name)
