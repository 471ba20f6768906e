"""A bounded pool of open partition files for the log admin's metadata queries.

Opening a partition file costs a SQLite connection, its pragmas and a format check; a container's tasks ask
the admin about the same partitions at every commit (their changelog's end) and at start-up. The pool keeps
at most ``max_open`` partitions open, the least recently used closed first, so repeated queries reuse one
handle while a container with thousands of partitions never holds more than the bound (each open partition
holds about four descriptors: its file, WAL and shared-memory file and a segment, plus segments a query read).

Guarantees:

* **never a stale file**: a pooled partition whose file was deleted or replaced since it was opened (its
  stream cleared or re-created, by this process or another) is closed and the current file opened instead, so
  a pooled handle answers exactly as a fresh one would;
* **one thread per handle**: a partition is taken out of the pool while a caller uses it and put back after,
  so two threads never share a connection; a second thread asking for a partition in use opens its own, and
  the one put back last stays (the other is closed). Open handles stay within ``max_open`` plus one per
  thread inside a query;
* **a handle that failed is dropped**: a query that raised closes its handle rather than pool it;
* ``max_open=0`` opens and closes the file around each query (no pooling).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from millstream.embedded.log.storage import LogPartition

Opener = Callable[[Path, str, int], LogPartition]
"""Opens the partition file at a path for a stream and partition: the seam tests count opens through."""


class OpenPartitions:
    """The pool; thread-safe. ``close`` closes every pooled handle (the admin's ``stop``)."""

    def __init__(self, max_open: int, opener: Opener) -> None:
        if max_open < 0:
            raise ValueError(f"max_open must be >= 0, got {max_open}")
        self.max_open = max_open
        self._open = opener
        self._pool: OrderedDict[tuple[str, int], LogPartition] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._pool)

    @contextmanager
    def partition(self, path: Path, stream: str, partition: int) -> Iterator[LogPartition]:
        """The open partition at ``path``, current (never a deleted or replaced file), for this caller alone."""
        key = (stream, partition)
        with self._lock:
            log = self._pool.pop(key, None)
        if log is not None and not log.is_current():
            log.close()
            log = None
        if log is None:
            log = self._open(path, stream, partition)
        try:
            yield log
        except BaseException:
            log.close()
            raise
        self._put_back(key, log)

    def _put_back(self, key: tuple[str, int], log: LogPartition) -> None:
        closing = []
        with self._lock:
            if self.max_open == 0:
                closing.append(log)
            else:
                replaced = self._pool.pop(key, None)
                if replaced is not None:
                    closing.append(replaced)
                self._pool[key] = log
                while len(self._pool) > self.max_open:
                    closing.append(self._pool.popitem(last=False)[1])
        for each in closing:
            each.close()

    def forget_stream(self, stream: str) -> None:
        """Close the pooled partitions of ``stream`` (it is being deleted: release its files now)."""
        with self._lock:
            keys = [key for key in self._pool if key[0] == stream]
            closing = [self._pool.pop(key) for key in keys]
        for log in closing:
            log.close()

    def close(self) -> None:
        with self._lock:
            closing = list(self._pool.values())
            self._pool.clear()
        for log in closing:
            log.close()
