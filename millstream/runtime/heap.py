"""A container's start-up heap, frozen out of Python's cyclic garbage collector while its tasks run.

Why: a full collection traverses every object the collector tracks, and a container's start-up leaves a heap that
grows with its tasks (task instances, stores, serdes, consumers, their commit machinery: some 230 tracked objects
per task with a changelog-backed store), alive until the container ends. At 1,000 such tasks each full collection
traversed about 230,000 objects and held every Python thread for up to 90 ms of CPU, every few commit rounds: a
pause that grew with the tasks. ``gc.freeze`` moves every tracked object to a permanent generation that no
collection visits, so collections then traverse only what was allocated since (the longest pause there: 17 ms;
``benchmarks/commit_scale.py``, the performance page).

Guarantees and costs:

* the start-up's garbage is collected first (one full collection), so what is frozen is what was alive then;
* a frozen object is still freed as soon as its reference count drops to zero: only a reference cycle among frozen
  objects that becomes garbage while they are frozen outlives its last reference, until the heap is unfrozen. That
  is bounded by the start-up heap, and start-up objects live as long as the container;
* ``gc.freeze`` is process-wide: containers of one process (the in-process runner's threads) each freeze at their
  start and the heap is unfrozen when the last of them ends, so a process that runs containers one after another
  (a reused Spark Python worker, a test session) collects each one's leftovers after it;
* ``job.container.gc.freeze.enabled=false`` leaves the collector alone, for a process whose other objects (a notebook's)
  should not be frozen with the container's; so does a container of fewer tasks than
  ``job.container.gc.freeze.min.tasks`` (256), whose start-up heap does not repay the freeze's own full collection of
  the whole process (0.13 s each in this project's test session).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class _Freezes:
    """The containers of this process running with the heap frozen: the heap is unfrozen when none is left."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0


_freezes = _Freezes()


@contextmanager
def start_up_heap_frozen(enabled: bool = True) -> Iterator[None]:
    """Within: what is alive on entry is frozen (after one full collection); on the last such exit of the process,
    unfrozen. Does nothing when not ``enabled``."""
    if not enabled:
        yield
        return
    with _freezes.lock:
        gc.collect()
        gc.freeze()
        _freezes.running += 1
    try:
        yield
    finally:
        with _freezes.lock:
            _freezes.running -= 1
            if _freezes.running == 0:
                gc.unfreeze()
