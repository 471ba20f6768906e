"""The RocksDB engine (rocksdict, raw bytes): the default persistent store.

The write-ahead log is off: a store with a backup is always restored from its checkpoint at start
(its current directory is never trusted after a crash), and ``flush`` writes the memtable to SST
files before every checkpoint, so the WAL would only cost write throughput. Checkpoints are
RocksDB's own (hard links to the immutable SST files, copies of the small rest): a few milliseconds
whatever the store's size.
"""

from __future__ import annotations

import os
import resource
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import rocksdict

from millstream.config.settings import Settings
from millstream.config.views import (
    ROCKSDB_BLOCK_SIZE_BYTES,
    ROCKSDB_COMPACTION_STYLE,
    ROCKSDB_COMPRESSION,
    ROCKSDB_KEEP_LOG_FILE_NUM,
    ROCKSDB_MAX_LOG_FILE_SIZE_BYTES,
    ROCKSDB_MAX_OPEN_FILES,
    RocksDbCompactionStyle,
    RocksDbCompression,
    StoreConfig,
)
from millstream.storage.bulk_load import VectorMemtableLoader
from millstream.storage.errors import StoreError
from millstream.storage.kv import BulkLoader, Entry, KeyValueStorageEngine
from millstream.storage.memory import SharedRocksDbMemory, container_rocksdb_memory
from millstream.storage.small_tables import SMALL_TABLES_MAX, ranges_to_merge

BULK_LOAD_BACKGROUND_JOBS = 8
"""RocksDB's background jobs while a store is open for a bulk load (a vector memtable), against its default 2. RocksDB
gives a quarter of them to flushes, so two full memtables are sorted and written at once instead of one after the
other: in a replay of keys in no order, that sort at the flush is most of the CPU (about 1 µs per key), and with one
flush thread the replay waited for it. Two, because with ``rocksdb.num.write.buffers`` at its default 3 one
memtable fills while at most two flush. The thread pools are the process's: a load raises them to two flush and
six compaction threads for the process's later stores too, each of which still runs one flush and one compaction
at a time."""


ROCKSDB_FIXED_DESCRIPTORS = 6
"""Descriptors an open RocksDB store holds besides its table files: its directory (twice), ``LOCK``, the
write-ahead log, ``MANIFEST`` and the info log (counted on an open store)."""


def _open_files_hint(error: Exception) -> str:
    """What to change when RocksDB ran out of descriptors opening a store: the limit and the key that bounds them."""
    if "Too many open files" not in str(error):
        return ""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f" (the open-file limit, ulimit -n, is {soft}, at most {hard}: raise it, or bound each store's files with "
        "stores.<store>.rocksdb.max.open.files)"
    )


@dataclass(frozen=True)
class InfoLogBound:
    """How much of RocksDB's info log (``LOG``: options at open, every flush and compaction, statistics every ten
    minutes) a store keeps: rolled at ``max_file_size`` bytes (0: only at open), ``files`` files at most, the
    current one included. RocksDB's own defaults (never rolled while open, 1,000 files kept) let the log of a store
    that flushes at every local checkpoint grow by about 2 MB an hour without bound; these are Samza's."""

    max_file_size: int = ROCKSDB_MAX_LOG_FILE_SIZE_BYTES
    files: int = ROCKSDB_KEEP_LOG_FILE_NUM


COMPRESSIONS: dict[RocksDbCompression, Callable[[], rocksdict.DBCompressionType]] = {
    "none": rocksdict.DBCompressionType.none,
    "snappy": rocksdict.DBCompressionType.snappy,
    "bzip2": rocksdict.DBCompressionType.bz2,
    "zlib": rocksdict.DBCompressionType.zlib,
    "lz4": rocksdict.DBCompressionType.lz4,
    "lz4hc": rocksdict.DBCompressionType.lz4hc,
    "zstd": rocksdict.DBCompressionType.zstd,
}
"""``stores.<s>.rocksdb.compression``'s values (Samza's names) and RocksDB's types."""

COMPACTION_STYLES: dict[RocksDbCompactionStyle, Callable[[], rocksdict.DBCompactionStyle]] = {
    "level": rocksdict.DBCompactionStyle.level,
    "universal": rocksdict.DBCompactionStyle.universal,
}
"""``stores.<s>.rocksdb.compaction.style``'s values (Samza's names) and RocksDB's styles."""


@dataclass(frozen=True)
class StoreTuning:
    """A store's RocksDB options beyond its memory, from its ``stores.<s>.rocksdb.*`` keys (Samza's keys and
    defaults): its info log's bound; the most files it keeps open, its table files included (-1: no bound); the
    compression of its table files; the size of their blocks, the unit a read loads and the block cache holds; how
    its table files are compacted."""

    info_log: InfoLogBound = InfoLogBound()
    max_open_files: int = ROCKSDB_MAX_OPEN_FILES
    compression: RocksDbCompression = ROCKSDB_COMPRESSION
    block_size: int = ROCKSDB_BLOCK_SIZE_BYTES
    compaction_style: RocksDbCompactionStyle = ROCKSDB_COMPACTION_STYLE

    @classmethod
    def of(cls, config: StoreConfig) -> StoreTuning:
        return cls(
            InfoLogBound(config.rocksdb_max_log_file_size_bytes, config.rocksdb_keep_log_file_num),
            config.rocksdb_max_open_files,
            config.rocksdb_compression,
            config.rocksdb_block_size_bytes,
            config.rocksdb_compaction_style,
        )


class RocksDbKeyValueStorageEngine(KeyValueStorageEngine):
    persistent = True

    def __init__(
        self,
        path: Path,
        write_buffer_size: int | None = None,
        write_buffers: int = 3,
        *,
        cache_size: int | None = None,
        shared_memory: SharedRocksDbMemory | None = None,
        tuning: StoreTuning | None = None,
    ) -> None:
        """``cache_size``: the store's own block cache (0: none; None: RocksDB's default); ``shared_memory``: the
        container's one cache, which then also carries the memtables (and replaces ``cache_size``); ``tuning``:
        the store's other options (default: Samza's)."""
        self.path = Path(path)
        self.tuning = tuning or StoreTuning()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.write_buffer_size = write_buffer_size
        self._write_buffers = write_buffers
        self._cache_size = cache_size
        self._shared_memory = shared_memory
        self._closed = True
        self._open(vector_memtable=False)

    def _options(self, vector_memtable: bool) -> rocksdict.Options:
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_max_file_opening_threads(_file_opening_threads(self.path))
        if self.write_buffer_size is not None:
            # Full memtables are flushed in the background while the task runs; a commit's snapshot
            # only has to flush the one being filled.
            options.set_write_buffer_size(self.write_buffer_size)
            options.set_max_write_buffer_number(self._write_buffers)
        if vector_memtable:
            options.set_allow_concurrent_memtable_write(False)  # a vector memtable takes one writer at a time
            options.set_memtable_factory(rocksdict.MemtableFactory.vector())
            options.set_max_background_jobs(BULK_LOAD_BACKGROUND_JOBS)
        _table_options(options, self.tuning.block_size, self._cache_size, self._shared_memory)
        options.set_max_log_file_size(self.tuning.info_log.max_file_size)
        options.set_keep_log_file_num(self.tuning.info_log.files)
        options.set_max_open_files(self.tuning.max_open_files)
        options.set_compression_type(COMPRESSIONS[self.tuning.compression]())
        options.set_compaction_style(COMPACTION_STYLES[self.tuning.compaction_style]())
        return options

    def _open(self, vector_memtable: bool) -> None:
        options = self._options(vector_memtable)
        try:
            # The default column family's options named too: given only the database's, rocksdict opens an
            # existing store's column family with the options its OPTIONS file recorded, not these.
            self._db = rocksdict.Rdict(str(self.path), options, column_families={"default": options})
        except Exception as error:  # rocksdict raises plain exceptions with RocksDB's status text
            raise StoreError(f"cannot open RocksDB store at '{self.path}': {error}{_open_files_hint(error)}") from None
        self.vector_memtable = vector_memtable
        """Whether the store is open for a bulk load (``VectorMemtableLoader``), not with its normal options."""
        self._closed = False
        write_options = rocksdict.WriteOptions()
        write_options.disable_wal = True  # type: ignore[method-assign,assignment] # a property, stubbed as a method
        self._db.set_write_options(write_options)

    def reopen(self, vector_memtable: bool) -> None:
        """Close the store (its memtables flushed) and open it again with a vector memtable (for a bulk load) or
        with its normal options."""
        self.close()
        self._open(vector_memtable)

    def __repr__(self) -> str:
        return f"RocksDbKeyValueStorageEngine({str(self.path)!r})"

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(key)
        return value

    def get_all(self, keys: Sequence[bytes]) -> list[bytes | None]:
        if not keys:
            return []
        values: list[bytes | None] = list(self._db.get(list(keys)) or ())
        return values

    def put(self, key: bytes, value: bytes) -> None:
        self._db.put(key, value)

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        for key, value in entries:
            if value is None:
                batch.delete(key)
            else:
                batch.put(key, value)
        self._db.write(batch)

    def delete(self, key: bytes) -> None:
        self._db.delete(key)

    def put_columns(self, keys: Sequence[bytes | None], values: Sequence[bytes | None]) -> None:
        """One write batch, filled by ``map`` over the columns so that the loop runs in C: a changelog replay
        is bound by the work per record in Python. A None key or value makes rocksdict refuse the record; the
        batch is then filled again record by record, skipping the key or deleting it."""
        batch = rocksdict.WriteBatch(raw_mode=True)
        try:
            deque(map(batch.put, keys, values), maxlen=0)  # type: ignore[arg-type]  # None is refused, below
        except (ValueError, KeyError, TypeError):  # rocksdict's refusal of a None value (ValueError) or key
            batch.clear()
            for key, value in zip(keys, values, strict=True):
                if key is None:
                    continue
                if value is None:
                    batch.delete(key)
                else:
                    batch.put(key, value)
        self._db.write(batch)

    def bulk_loader(self) -> BulkLoader:
        """Write batches into the normal memtable while the keys come in ascending order, into a vector memtable
        from the first that do not (``millstream.storage.bulk_load``)."""
        return VectorMemtableLoader(self)

    def range(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        return _scan(self._db.iter(), start, end, self.path)

    def snapshot(self, start: bytes | None, end: bytes | None) -> Iterable[Entry]:
        return _Snapshot(self._db.iter(), start, end, self.path)

    def flush(self) -> None:
        """Write the memtable to a table file, then merge the store's small table files once there are too many
        (``millstream.storage.small_tables``): a store flushed at every commit keeps a bounded number of files
        whatever the order of its keys."""
        try:
            self._db.flush()
            self._merge_small_tables()
        except Exception as error:  # rocksdict raises plain exceptions with RocksDB's status text
            raise StoreError(f"cannot flush RocksDB store at '{self.path}': {error}") from None

    def _merge_small_tables(self) -> None:
        """Compact the small table files together once there are too many (RocksDB's compaction moves a file whose
        keys overlap nothing below it down as it is). Counted first from RocksDB's per-level properties, a few µs:
        the files are listed only when the store holds more than could need it."""
        tables = sum(self._db.property_int_value(f"rocksdb.num-files-at-level{level}") or 0 for level in range(7))
        if tables <= SMALL_TABLES_MAX:
            return
        options = rocksdict.CompactOptions()
        options.set_bottommost_level_compaction(rocksdict.BottommostLevelCompaction.force())
        for start, end in ranges_to_merge(self._db.live_files()):
            self._db.compact_range(start, end, options)

    def checkpoint(self, path: Path) -> None:
        self.flush()
        try:
            rocksdict.Checkpoint(self._db).create_checkpoint(str(path))
        except Exception as error:  # rocksdict raises plain exceptions with RocksDB's status text
            raise StoreError(
                f"cannot make a checkpoint of RocksDB store at '{self.path}' in '{path}': {error}"
            ) from None

    def ingest(self, files: Sequence[Path]) -> None:
        """Copies the files in (RocksDB's ``move_files`` would delete them from where they are)."""
        if not files:
            return  # RocksDB rejects an empty list
        try:
            self._db.ingest_external_file([str(file) for file in files])
        except Exception as error:  # rocksdict raises plain exceptions with RocksDB's status text
            names = ", ".join(f"'{file}'" for file in files)
            raise StoreError(
                f"cannot ingest table files {names} into RocksDB store at '{self.path}': {error}"
            ) from None

    def verify(self) -> None:
        """Read every entry with block checksums verified: opening reads only an SST's footer and index, so
        a corrupt data block would otherwise surface at the first read of one of its keys, mid-job."""
        options = rocksdict.ReadOptions()
        options.set_verify_checksums(True)
        iterator = self._db.iter(options)
        try:
            iterator.seek_to_first()
            while iterator.valid():
                iterator.next()
            iterator.status()
            problem = None
        except Exception as error:  # rocksdict raises plain exceptions with RocksDB's status text
            problem = str(error)
        # an iterator keeps the database (and its LOCK) open after close: drop it before anyone reopens
        del iterator
        if problem is not None:
            raise StoreError(f"RocksDB store at '{self.path}' does not verify: {problem}")

    def close(self) -> None:
        # the closed Rdict stays: a read racing with close (another thread reading an adjunct store)
        # gets rocksdict's DbClosedError, which readers of replaced versions retry
        if not getattr(self, "_closed", True):
            self._closed = True
            try:
                self._db.close()
            except Exception as error:  # rocksdict raises plain exceptions with RocksDB's status text
                # e.g. a superseded attempt whose directory the new owner deleted: its memtable has nowhere to go
                raise StoreError(f"cannot close RocksDB store at '{self.path}': {error}") from None


def _scan(iterator: rocksdict.RdictIter, start: bytes | None, end: bytes | None, path: Path) -> Iterator[Entry]:
    """Entries from ``start`` to before ``end``; the RocksDB iterator reads one consistent version."""
    if start is None:
        iterator.seek_to_first()
    else:
        iterator.seek(start)
    while iterator.valid():
        key = iterator.key()
        if end is not None and key >= end:
            return
        yield key, iterator.value()
        iterator.next()
    # an iterator also stops at an unreadable block: without this a corrupt file would read as fewer entries
    try:
        iterator.status()
    except Exception as error:  # rocksdict raises plain exceptions with RocksDB's status text
        raise StoreError(f"reading RocksDB store at '{path}' failed: {error}") from None


class _Snapshot:
    """A consistent view of a range, re-iterable: one RocksDB iterator made when the snapshot is taken
    (an iterator reads the version current at its creation) and sought again for every iteration.

    rocksdict's ``Snapshot`` serves point reads from the snapshot but iterates the live database, so
    it cannot be used for this. Iterations of one snapshot therefore run one at a time; starting one
    while another is still going raises ``StoreError``.
    """

    def __init__(self, iterator: rocksdict.RdictIter, start: bytes | None, end: bytes | None, path: Path) -> None:
        self._iterator: rocksdict.RdictIter | None = iterator
        self._path = path
        self._start = start
        self._end = end
        self._active = False

    def __iter__(self) -> Iterator[Entry]:
        if self._iterator is None:
            raise StoreError("the snapshot was closed")
        if self._active:
            raise StoreError("a snapshot is iterated one pass at a time; finish the current pass first")
        return self._iterate(self._iterator)

    def _iterate(self, iterator: rocksdict.RdictIter) -> Iterator[Entry]:
        self._active = True
        try:
            yield from _scan(iterator, self._start, self._end, self._path)
        finally:
            self._active = False

    def close(self) -> None:
        self._iterator = None


TABLES_PER_OPENING_THREAD = 16
"""How many table files make one more thread worth starting to open a store's files (``_file_opening_threads``)."""

OPENING_THREADS_MAX = 16
"""RocksDB's own default for ``max_file_opening_threads``."""


def _file_opening_threads(path: Path) -> int:
    """The threads RocksDB may start to open a store's table files: one per ``TABLES_PER_OPENING_THREAD`` of them,
    at least one, at most RocksDB's default of 16.

    RocksDB starts ``max_file_opening_threads`` threads at every open, a new store's too: with its default of 16,
    15 thread starts per store, half the CPU of opening an empty store (1,000 stores: 1.5 s against 0.84 s with
    one thread, and more per store the more a process already holds). A container opens a store per task at
    start, most of them new or small, so a store of few tables opens them on the calling thread; one restored
    from a large checkpoint still opens its many tables in parallel."""
    try:
        with os.scandir(path) as entries:
            tables = sum(1 for entry in entries if entry.name.endswith(".sst"))
    except FileNotFoundError:
        return 1
    return max(1, min(OPENING_THREADS_MAX, tables // TABLES_PER_OPENING_THREAD))


def _table_options(
    options: rocksdict.Options, block_size: int, cache_size: int | None, shared: SharedRocksDbMemory | None
) -> None:
    """The table files' block size, and the block cache: the container's shared one, the store's own of
    ``cache_size`` (0: none), or RocksDB's default (both None)."""
    table = rocksdict.BlockBasedOptions()
    table.set_block_size(block_size)
    if shared is not None:
        table.set_block_cache(shared.cache)
        options.set_write_buffer_manager(shared.write_buffer_manager)
    elif cache_size:
        table.set_block_cache(rocksdict.Cache(cache_size))
    elif cache_size == 0:
        table.disable_cache()
    options.set_block_based_table_factory(table)


class RocksDbStorageEngineFactory:
    """``stores.<s>.factory=rocksdb``: memtables of ``container.write.buffer.size.bytes`` / tasks and a block cache
    of ``container.cache.size.bytes`` / tasks, or the container's shared memory
    (``job.container.rocksdb.memory.mb``)."""

    persistent = True

    def __init__(self, shared_memory: SharedRocksDbMemory | None = None) -> None:
        self.shared_memory = shared_memory

    @classmethod
    def from_config(cls, config: Settings) -> RocksDbStorageEngineFactory:
        return cls(container_rocksdb_memory(config))

    def get_storage_engine(
        self, store_name: str, store_dir: Path, config: StoreConfig, tasks_in_container: int = 1
    ) -> KeyValueStorageEngine:
        tasks = max(tasks_in_container, 1)
        per_task = max(config.container_write_buffer_size_bytes // tasks, 64 * 1024)
        return RocksDbKeyValueStorageEngine(
            store_dir,
            per_task,
            config.rocksdb_num_write_buffers,
            cache_size=config.container_cache_size_bytes // tasks,
            shared_memory=self.shared_memory,
            tuning=StoreTuning.of(config),
        )

    def open_files(self, config: StoreConfig) -> tuple[int, bool]:
        """The most descriptors one store holds, and whether that is a bound: ``rocksdb.max.open.files`` when set
        (RocksDB counts its own files in it); else ``ROCKSDB_FIXED_DESCRIPTORS`` and one table file, which the
        store exceeds by one descriptor per table file as it grows."""
        if config.rocksdb_max_open_files == -1:
            return ROCKSDB_FIXED_DESCRIPTORS + 1, False
        return config.rocksdb_max_open_files, True
