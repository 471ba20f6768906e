"""The embedded metadata store: one SQLite file shared by the driver and every container process.

SQLite in WAL mode lets readers proceed while one writer holds the lock, and ``BEGIN IMMEDIATE``
takes that lock before ``compare_and_put`` reads what it compares, so the comparison and the write
are one atomic step for every process using the file.

Every write is one short transaction: ``BEGIN IMMEDIATE``, the holder record (see
:mod:`millstream.embedded.sqlite_lock`), the statements, ``COMMIT``. Nothing else runs while the lock is
held: no callback into other code, no network, no waiting. A writer that finds the lock taken waits for it
in rounds of ``metadata.store.lock.wait.ms``, logging after each round who holds it (container, attempt,
pid, host, since); it waits as long as the holder's lease (``metadata.store.lock.lease.ms``) runs, so a
paused process never fails the job's other containers within its lease. Past the lease, the job's newest
driver ends a holder it can prove is a process on its own host that holds the lock (a stopped process
keeps SQLite's file lock until it dies, and nobody else can release it); any other writer fails, naming
the holder.

The store object is cheap to pickle: only the path and the lock settings travel (to Spark executors, to
spawned processes), and each process opens its own connection on first use. A connection inherited through
``os.fork`` is never used by the child; the child notices the pid change and opens its own.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metadata_factory import MetadataStoreFactory, metadata_store_path
from millstream.contracts.metadata_settings import MetadataConfig
from millstream.embedded.sqlite_lock import (
    Decision,
    HolderRecordWriter,
    LockHolder,
    LockLease,
    local_write_lock_pid,
    read_holder_record,
    this_holder,
)
from millstream.errors import MillstreamError
from millstream.file_locks import process_state
from millstream.files import claim_marker

if TYPE_CHECKING:
    from millstream.config.settings import Settings

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 30_000
"""How long opening a new file retries SQLite's schema and journal-mode changes."""

T = TypeVar("T")

_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (namespace, key)
)
"""
_SCHEMA = _TABLE.format(name="metadata")
"""A rowid table, its ``(namespace, key)`` in an index of their own: every lookup and write searches that index,
whose cells hold the keys only. Files made by earlier releases hold a ``WITHOUT ROWID`` table, whose B-tree cells are
whole rows: a search compared its key with any row on its path, and a row whose value spills to overflow pages
(the job model, about 65 bytes per task) was read whole for each such comparison, so every checkpoint written cost
more the more tasks the job had. ``_upgrade_without_rowid`` rewrites such a table at the first open."""
_TABLE_SQL = "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'metadata'"
_UPGRADE = f"""
{_TABLE.format(name="metadata_upgrade")};
INSERT INTO metadata_upgrade (namespace, key, value) SELECT namespace, key, value FROM metadata;
DROP TABLE metadata;
ALTER TABLE metadata_upgrade RENAME TO metadata;
"""
_PUT = (
    "INSERT INTO metadata (namespace, key, value) VALUES (?, ?, ?) "
    "ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value"
)
"""Updates a present row in place (``INSERT OR REPLACE`` deletes it and inserts it again, in the table and the
index)."""


@dataclass(frozen=True)
class SqliteLockSettings:
    """How writers wait for the write lock (``metadata.store.lock.*``) and the testing stop point."""

    lease_ms: int = 120_000
    wait_ms: int = 5_000
    testing_stop_in_write: str | None = None
    testing_marker_dir: str | None = None


class MetadataStoreError(MillstreamError):
    """The metadata store could not be opened or an operation on it failed; names the file."""


class SqliteMetadataStore(MetadataStore):
    """``MetadataStore`` on one SQLite file.

    Safe for several processes at once (SQLite's file locks) and for several threads of one process
    (one connection per process, used under a lock). Every write is committed, with
    ``synchronous=FULL``, before the call returns. ``clock_ms`` (monotonic milliseconds) times the
    lease of a writer that holds the lock while this one waits.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        settings: SqliteLockSettings | None = None,
        *,
        clock_ms: Callable[[], int] = lambda: time.monotonic_ns() // 1_000_000,
    ) -> None:
        self.path = Path(path)
        self.settings = settings or SqliteLockSettings()
        self._clock_ms = clock_ms
        self._reset()

    def _reset(self) -> None:
        self._connection: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._writer = ""
        self._may_break = False
        self._record = HolderRecordWriter(self.path)
        self._record_failed = False

    def __getstate__(self) -> dict[str, Any]:
        # Who writes, and whether it may break the lock, belong to this process: not passed on.
        return {"path": str(self.path), "settings": self.settings}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self.settings = state.get("settings") or SqliteLockSettings()
        self._clock_ms = lambda: time.monotonic_ns() // 1_000_000
        self._reset()

    def __repr__(self) -> str:
        return f"SqliteMetadataStore({str(self.path)!r})"

    def set_writer(self, writer: str) -> None:
        self._writer = writer

    def take_over(self) -> None:
        self._may_break = True

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        if self._pid != os.getpid():
            # The parent's connection and lock state are not ours to use (or to close) after a fork.
            self._reset()
        with self._lock:
            if self._connection is None:
                self._connection = self._open()
            try:
                yield self._connection
            except sqlite3.Error as error:
                raise MetadataStoreError(f"metadata store '{self.path}': {error}") from error

    def _open(self) -> sqlite3.Connection:
        wait_ms = self.settings.wait_ms
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                self.path, timeout=wait_ms / 1000, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as error:
            raise MetadataStoreError(f"cannot open metadata store '{self.path}': {error}") from None
        try:
            connection.execute(f"PRAGMA busy_timeout = {wait_ms}")
            _retry_while_locked(lambda: connection.execute("PRAGMA journal_mode = WAL"))
            connection.execute("PRAGMA synchronous = FULL")
            _retry_while_locked(lambda: connection.execute(_SCHEMA))
            _upgrade_without_rowid(connection, self.path)
        except sqlite3.Error as error:
            connection.close()
            raise MetadataStoreError(f"cannot open metadata store '{self.path}': {error}") from None
        return connection

    def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read; WAL readers are not blocked by the writer, but a reader can find the file busy
        (another process recovering the WAL), so it retries for as long as a writer would wait."""
        with self._locked() as connection:
            deadline = self._clock_ms() + self.settings.lease_ms
            while True:
                try:
                    return body(connection)
                except sqlite3.OperationalError as error:
                    if not _is_busy(error) or self._clock_ms() >= deadline:
                        raise

    def _write(self, namespace: str, body: Callable[[sqlite3.Connection], bool | None]) -> bool:
        """One short write transaction: the lock, the holder record, ``body``'s statements, ``COMMIT``
        (``ROLLBACK`` when ``body`` returns False or raises). Returns whether it committed."""
        with self._locked() as connection:
            self._begin(connection)
            try:
                self._announce(namespace)
                committed = body(connection) is not False
                connection.execute("COMMIT" if committed else "ROLLBACK")
            except BaseException:
                if connection.in_transaction:  # never leave the lock held (or the connection unusable) behind
                    connection.execute("ROLLBACK")
                raise
            return committed

    def _begin(self, connection: sqlite3.Connection) -> None:
        lease = LockLease(self.settings.lease_ms, may_break=self._may_break)
        while True:
            try:
                connection.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as error:
                if not _is_busy(error):
                    raise
            self._waited(lease)

    def _waited(self, lease: LockLease) -> None:
        """A round of waiting for the lock ended without it: name the holder, and go on waiting, break the
        lock, or fail, as the holder's lease says."""
        holder = self.lock_holder()
        now = self._clock_ms()
        decision = lease.observe(now, holder)
        described = _describe(holder)
        if decision is Decision.WAIT:
            log.warning(
                "metadata store '%s': waiting for its write lock, held by %s; its lease "
                "(metadata.store.lock.lease.ms=%d) runs out in %d ms",
                self.path, described, self.settings.lease_ms, lease.remaining_ms(now),
            )  # fmt: skip
            return
        past_lease = (
            f"metadata store '{self.path}': its write lock is held by {described}, "
            f"past its lease (metadata.store.lock.lease.ms={self.settings.lease_ms})"
        )
        if decision is Decision.GIVE_UP:
            raise MetadataStoreError(
                f"{past_lease}; this process may not break it: a newer run of the job (millstream run) ends a "
                "holder on its own host once the lease has expired, or resume or end that process"
            )
        if holder is None or not self._end_holder(holder, past_lease):
            raise MetadataStoreError(
                f"{past_lease}; it cannot be broken from host {socket.gethostname()}: SQLite's lock is released "
                "only when its holder resumes or ends, and no process of this host is proven to hold it; "
                "resume or end that process on its host"
            )

    def _end_holder(self, holder: LockHolder, past_lease: str) -> bool:
        """End the holder if this host's lock table proves it holds the lock and it is not this process."""
        pid = local_write_lock_pid(self.path)
        if pid is None or pid != holder.pid or pid == os.getpid() or holder.host != socket.gethostname():
            return False
        log.error(
            "%s; ending pid %d so this newer run can take over (its open transaction is rolled back)", past_lease, pid
        )
        with suppress(ProcessLookupError):  # it ended meanwhile: the lock is free
            os.kill(pid, signal.SIGKILL)
        return True

    def lock_holder(self) -> LockHolder | None:
        """Who holds the write lock, as far as can be told: the holder record, unless this host's lock
        table shows another local process holding it (stopped before it could write its record)."""
        record = read_holder_record(self.path)
        pid = local_write_lock_pid(self.path)
        if pid is not None and (record is None or (record.pid, record.host) != (pid, socket.gethostname())):
            return LockHolder(pid, socket.gethostname(), "an unknown time (it wrote no holder record)")
        return record

    def _announce(self, namespace: str) -> None:
        """Write the holder record, now that this process holds the lock (testing: then stop here)."""
        try:
            self._record.write(this_holder(self._writer))
        except OSError as error:
            if not self._record_failed:
                log.warning("metadata store '%s': cannot write its lock holder record: %s", self.path, error)
                self._record_failed = True
        if self.settings.testing_stop_in_write == namespace:
            self._testing_stop(namespace)

    def _testing_stop(self, namespace: str) -> None:
        """Testing only (``metadata.store.testing.stop.in.write``): stop this process with the write lock
        held, once per marker directory (the marker holds the pid), as a paused container would."""
        marker_dir = self.settings.testing_marker_dir
        if marker_dir is None or not claim_marker(Path(marker_dir) / f"metadata-write-{namespace}"):
            return
        log.warning("testing: pid %d stops holding the metadata store's write lock (%s)", os.getpid(), namespace)
        os.kill(os.getpid(), signal.SIGSTOP)

    def init(self) -> None:
        with self._locked():
            pass

    def get(self, namespace: str, key: str) -> bytes | None:
        row = self._read(
            lambda c: c.execute(
                "SELECT value FROM metadata WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
        )
        return None if row is None else bytes(row[0])

    def put(self, namespace: str, key: str, value: bytes) -> None:
        self.put_all(namespace, {key: value})

    def put_all(self, namespace: str, items: Mapping[str, bytes]) -> None:
        """Write every item in one transaction: all of them or none."""
        rows = [(namespace, key, bytes(value)) for key, value in items.items()]
        self._write(
            namespace,
            lambda c: _none(c.executemany(_PUT, rows)),
        )

    def delete(self, namespace: str, key: str) -> None:
        self.delete_all(namespace, [key])

    def delete_all(self, namespace: str, keys: Iterable[str]) -> None:
        """Delete every key in one transaction."""
        rows = [(namespace, key) for key in keys]
        if rows:
            self._write(
                namespace, lambda c: _none(c.executemany("DELETE FROM metadata WHERE namespace = ? AND key = ?", rows))
            )

    def all(self, namespace: str) -> dict[str, bytes]:
        rows = self._read(
            lambda c: c.execute(
                "SELECT key, value FROM metadata WHERE namespace = ? ORDER BY key", (namespace,)
            ).fetchall()
        )
        return {key: bytes(value) for key, value in rows}

    def compare_and_put(
        self,
        namespace: str,
        key: str,
        value: bytes,
        expected: Mapping[tuple[str, str], bytes | None],
    ) -> bool:
        return self.compare_and_put_all([(namespace, key, value)], expected)

    def compare_and_put_all(
        self,
        items: Sequence[tuple[str, str, bytes]],
        expected: Mapping[tuple[str, str], bytes | None],
    ) -> bool:
        """One transaction: the expectations checked once, then every item written (one ``executemany``), or
        nothing."""
        rows = [(namespace, key, bytes(value)) for namespace, key, value in items]
        if not rows:
            return True

        def body(connection: sqlite3.Connection) -> bool:
            for (expected_namespace, expected_key), expected_value in expected.items():
                row = connection.execute(
                    "SELECT value FROM metadata WHERE namespace = ? AND key = ?", (expected_namespace, expected_key)
                ).fetchone()
                current = None if row is None else bytes(row[0])
                wanted = None if expected_value is None else bytes(expected_value)
                if current != wanted:
                    return False
            connection.executemany(_PUT, rows)
            return True

        return self._write(rows[0][0], body)

    def close(self) -> None:
        """Close this process's connection; the store reopens it if used again."""
        if self._pid != os.getpid():
            self._reset()
            return
        with self._lock:
            self._record.close()
            if self._connection is not None:
                self._connection.close()
                self._connection = None


def _none(_: object) -> None:
    return None


def _is_busy(error: sqlite3.OperationalError) -> bool:
    text = str(error)
    return "locked" in text or "busy" in text


def _describe(holder: LockHolder | None) -> str:
    if holder is None:
        return "a process that left no holder record"
    state = process_state(holder.pid) if holder.host == socket.gethostname() else ""
    return holder.describe() + (f" ({state})" if state else "")


def _upgrade_without_rowid(connection: sqlite3.Connection, path: Path) -> None:
    """Rewrite a file's ``WITHOUT ROWID`` metadata table as the rowid table ``_SCHEMA`` makes, in one transaction
    (every row kept; a process of an older release that has the file open goes on working: its statements name
    the same table and columns). Done by whichever process opens the file first; the others find it done."""

    def without_rowid() -> bool:
        row = connection.execute(_TABLE_SQL).fetchone()
        return row is not None and "WITHOUT ROWID" in row[0].upper()

    if not without_rowid():
        return
    connection.execute("BEGIN IMMEDIATE")
    try:
        if without_rowid():
            for statement in filter(str.strip, _UPGRADE.split(";")):
                connection.execute(statement)
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    log.info("metadata store '%s': rewrote its table as a rowid table (searches no longer read whole rows)", path)


def _retry_while_locked(operation: Any, attempts: int = 300) -> None:
    """Schema and journal-mode changes can report ``locked`` without waiting while another process
    opens the same new file; retry them for as long as the busy timeout would have waited."""
    for attempt in range(attempts):
        try:
            operation()
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(BUSY_TIMEOUT_MS / 1000 / attempts)


class SqliteMetadataStoreFactory(MetadataStoreFactory):
    """``metadata.store.factory=sqlite``: the file at ``metadata.store.path``, else in the job directory."""

    def get_metadata_store(self, config: Settings) -> MetadataStore:
        path = metadata_store_path(config)
        path.parent.mkdir(parents=True, exist_ok=True)
        metadata = config.view(MetadataConfig)
        settings = SqliteLockSettings(
            lease_ms=metadata.store_lock_lease_ms,
            wait_ms=metadata.store_lock_wait_ms,
            testing_stop_in_write=metadata.store_testing_stop_in_write,
            testing_marker_dir=metadata.store_testing_marker_dir,
        )
        return SqliteMetadataStore(path, settings)
