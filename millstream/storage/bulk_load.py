"""Filling a RocksDB store that starts empty in bulk (a changelog replay on a new host): through a vector
memtable, unless the keys come in order.

A changelog holds a store's keys in the order the task wrote them, which for most stores is no order at all.
RocksDB's normal memtable is a skiplist: each record is an insert at its place in key order, cheap for keys that
arrive in order and about 1.5 to 2 µs each for 1M keys in random order, two thirds of such a replay's CPU. A
vector memtable only appends, and sorts once when it is flushed (in C++); reads from it would have to sort it
first, so it is only for a store that nothing reads until the load is done.

So ``VectorMemtableLoader`` writes each batch through a write batch as ``put_columns`` does, into the store's
normal memtable while the keys have come in ascending order so far (the cheapest case for a skiplist, where
reopening would only add a flush), and from the first batch whose keys do not, it reopens the store with a vector
memtable of the same size and count (``rocksdb.num.write.buffers``): full memtables are flushed in the background
as usual, so memory stays bounded as it is. ``finish`` flushes and reopens the store with its normal options
before anything reads it (the revert after the checkpoint does). Every record goes in in the order handed over,
through RocksDB's own write path, so the last write of a key wins and a tombstone deletes exactly as before.
A crash during the load leaves a store directory the next restore deletes (a store's current directory is
never trusted at start), and one opened again opens with the store's normal options, whatever its files say.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Sequence
from itertools import islice
from typing import TYPE_CHECKING

from millstream.storage.errors import StoreError
from millstream.storage.kv import BulkLoader

if TYPE_CHECKING:
    from millstream.storage.rocksdb import RocksDbKeyValueStorageEngine

log = logging.getLogger(__name__)


class VectorMemtableLoader(BulkLoader):
    """Loads ``engine`` (open with its normal options, and empty) for one replay, on one thread."""

    def __init__(self, engine: RocksDbKeyValueStorageEngine) -> None:
        self.engine = engine
        self.through_vector = 0
        """Records written through the vector memtable (0 while the keys have come in order)."""
        self._last: bytes | None = None

    def put_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None], size: int) -> None:
        engine = self.engine
        if not engine.vector_memtable and not self._ascending(keys):
            engine.reopen(vector_memtable=True)
        engine.put_columns(keys, values)
        if engine.vector_memtable:
            self.through_vector += len(values)

    def _ascending(self, keys: Sequence[bytes | None]) -> bool:
        """Whether ``keys`` are strictly ascending and after every key before them (compared in C)."""
        if not keys:
            return True
        try:
            if self._last is not None and not self._last < keys[0]:  # type: ignore[operator]  # None: TypeError
                return False
            if not all(map(operator.lt, keys, islice(keys, 1, None))):  # type: ignore[arg-type]  # None: TypeError
                return False
        except TypeError:  # a keyless record: the batch is not in key order
            return False
        self._last = keys[-1]
        return True

    def finish(self) -> int:
        """Flush the vector memtable and reopen the store with its normal options; returns how many records
        went through the vector memtable."""
        if self.engine.vector_memtable:
            self.engine.flush()
            self.engine.reopen(vector_memtable=False)
        return self.through_vector

    def abort(self) -> None:
        """Reopen the store with its normal options (what it holds is the next restore's to delete); a failure
        to is only logged, so that it does not hide the replay's own."""
        if self.engine.vector_memtable:
            try:
                self.engine.reopen(vector_memtable=False)
            except StoreError as error:
                log.warning("%r: cannot reopen with its normal options after a failed load: %s", self.engine, error)
