"""A bounded pool of partition files an admin keeps open between metadata queries.

A task's commit asks the admin for the newest offset of its changelog partition. Opening the partition's
SQLite file for each query and closing it again cost about three times as much with a thousand files open in
the process as with a hundred (SQLite looks each opened file up among those already open), so a container's
commit round grew faster than its tasks. The pool keeps up to ``capacity`` files open, least recently used
out first; with at least as many as the container has changelog partitions, a commit round opens none.

A pooled file is never trusted blindly: each query checks first that the file is still the one opened (a
stream deleted or re-created since, by this process or another, is reopened, or reported missing), as
``LogPartition.state`` does. The pool is thread-safe: commits of several tasks query it at once, and one
partition's connection is used by one thread at a time (a query holds the pool's lock; it is one statement).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from millstream.systems.log.errors import LogStorageError
from millstream.systems.log.storage import LogPartition, PartitionState


class OpenPartitions:
    """Up to ``capacity`` open ``LogPartition``s by path; ``capacity`` 0 opens and closes one per query."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._open: OrderedDict[Path, LogPartition] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0
        """Files opened so far (for tests and the benchmark: a full pool opens none per query)."""

    def state(self, path: Path, open_partition: Callable[[], LogPartition]) -> PartitionState:
        """The partition's state, from its pooled file when that is still the one at ``path``, else from a
        file ``open_partition`` opens (which raises, naming the partition, when it cannot)."""
        with self._lock:
            pooled = self._open.pop(path, None)
            if pooled is not None:
                try:
                    state = pooled.state()
                except LogStorageError:  # deleted or replaced since: open what is there now
                    pooled.close()
                else:
                    self._keep(path, pooled)
                    return state
            partition = open_partition()
            self.opened += 1
            try:
                state = partition.state()
            except BaseException:
                partition.close()
                raise
            if self.capacity > 0:
                self._keep(path, partition)
            else:
                partition.close()
            return state

    def _keep(self, path: Path, partition: LogPartition) -> None:
        self._open[path] = partition
        while len(self._open) > self.capacity:
            _, oldest = self._open.popitem(last=False)
            oldest.close()

    def close(self) -> None:
        with self._lock:
            while self._open:
                _, partition = self._open.popitem()
                partition.close()
