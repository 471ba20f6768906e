"""Reading a changelog ahead of its replay: the system's bulk read runs on a thread of its own, a few batches
ahead of the engine's writes.

A bulk replay's time is the read (segment reads, checksums, unpacking) plus the engine's write of each batch.
Much of both runs outside the GIL (file reads, CRCs of large buffers, SQLite, RocksDB's write of a batch), so
reading the next batch while the engine writes this one takes the replay's wall time from their sum towards
the larger of the two. The order of the batches is kept, and at most ``depth`` batches wait in memory.

Guarantees: every batch comes in the source's order; an exception the source raises is raised to the reader,
after the batches before it; closing the reader early (or an exception in its loop) stops the thread and closes
the source on that thread, which is the only one that ever touches it (a consumer is meant for one thread at a
time), before ``read_ahead`` returns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

_END = object()
_OFFER_SECONDS = 0.1
"""How often a read that waits for room re-checks that its reader still wants it."""


def read_ahead(source: Generator[T, None, None], depth: int, name: str) -> Generator[T, None, None]:
    """The items of ``source``, read on a thread named ``name`` at most ``depth`` items ahead."""
    items: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=max(depth, 1))
    stopped = threading.Event()

    def offer(item: object, error: BaseException | None = None) -> bool:
        while not stopped.is_set():
            try:
                items.put((item, error), timeout=_OFFER_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for item in source:
                if not offer(item):
                    return
            offer(_END)
        except BaseException as error:  # handed to the reader, which raises it on its own thread
            offer(_END, error)
        finally:
            source.close()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item, error = items.get()
            if error is not None:
                raise error
            if item is _END:
                return
            yield item  # type: ignore[misc]  # every item but _END came from source
    finally:
        stopped.set()
        thread.join()
