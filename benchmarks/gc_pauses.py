"""The garbage collector's pauses during a stretch of a run: the CPU its collections took and the longest one.

A collection holds the GIL, so every Python thread of the process waits for it; its cost is the CPU of the thread it
ran on (``time.thread_time``), which a busy machine does not inflate as it does wall time. Where ``--calls`` and
CPU seconds per round take a median that a round with a full collection rarely is, these say what the collections
cost over the whole stretch."""

from __future__ import annotations

import gc
import time
from typing import Any


class CollectionPauses:
    """Watches every collection from ``start`` until ``stop``: their CPU in all and the longest one's."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.longest = 0.0
        self._began = 0.0

    def start(self) -> None:
        gc.callbacks.append(self._observe)

    def stop(self) -> None:
        if self._observe in gc.callbacks:
            gc.callbacks.remove(self._observe)

    def _observe(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.thread_time()
            return
        took = time.thread_time() - self._began
        self.cpu += took
        self.longest = max(self.longest, took)
