"""The embedded metadata store: one SQLite file shared by the driver and every container process.

SQLite in WAL mode lets readers proceed while one writer holds the lock, and ``BEGIN IMMEDIATE``
takes that lock before ``compare_and_put`` reads what it compares, so the comparison and the write
are one atomic step for every process using the file. Waits for the lock last up to
``busy_timeout`` (30 s) before an operation fails.

The store object is cheap to pickle: only the path travels (to Spark executors, to spawned
processes), and each process opens its own connection on first use. A connection inherited through
``os.fork`` is never used by the child; the child notices the pid change and opens its own.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from millstream.errors import MillstreamError
from millstream.metadata.base import MetadataStore
from millstream.metadata.factory import MetadataStoreFactory, metadata_store_path

if TYPE_CHECKING:
    from millstream.config.core import Config

BUSY_TIMEOUT_MS = 30_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS metadata (
    namespace TEXT NOT NULL,
    key TEXT NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID
"""


class MetadataStoreError(MillstreamError):
    """The metadata store could not be opened or an operation on it failed; names the file."""


class SqliteMetadataStore(MetadataStore):
    """``MetadataStore`` on one SQLite file.

    Safe for several processes at once (SQLite's file locks) and for several threads of one process
    (one connection per process, used under a lock). Every write is committed, with
    ``synchronous=FULL``, before the call returns.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._reset()

    def _reset(self) -> None:
        self._connection: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._lock = threading.RLock()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self._reset()

    def __repr__(self) -> str:
        return f"SqliteMetadataStore({str(self.path)!r})"

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
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            connection = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as error:
            raise MetadataStoreError(f"cannot open metadata store '{self.path}': {error}") from None
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            _retry_while_locked(lambda: connection.execute("PRAGMA journal_mode = WAL"))
            connection.execute("PRAGMA synchronous = FULL")
            _retry_while_locked(lambda: connection.execute(_SCHEMA))
        except sqlite3.Error as error:
            connection.close()
            raise MetadataStoreError(f"cannot open metadata store '{self.path}': {error}") from None
        return connection

    def init(self) -> None:
        with self._locked():
            pass

    def get(self, namespace: str, key: str) -> bytes | None:
        with self._locked() as connection:
            row = connection.execute(
                "SELECT value FROM metadata WHERE namespace = ? AND key = ?", (namespace, key)
            ).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, namespace: str, key: str, value: bytes) -> None:
        with self._locked() as connection:
            connection.execute(
                "INSERT OR REPLACE INTO metadata (namespace, key, value) VALUES (?, ?, ?)",
                (namespace, key, bytes(value)),
            )

    def put_all(self, namespace: str, items: Mapping[str, bytes]) -> None:
        """Write every item in one transaction: all of them or none."""
        rows = [(namespace, key, bytes(value)) for key, value in items.items()]
        with self._locked() as connection, _transaction(connection):
            connection.executemany("INSERT OR REPLACE INTO metadata (namespace, key, value) VALUES (?, ?, ?)", rows)

    def delete(self, namespace: str, key: str) -> None:
        with self._locked() as connection:
            connection.execute("DELETE FROM metadata WHERE namespace = ? AND key = ?", (namespace, key))

    def delete_all(self, namespace: str, keys: Iterable[str]) -> None:
        """Delete every key in one transaction."""
        rows = [(namespace, key) for key in keys]
        with self._locked() as connection, _transaction(connection):
            connection.executemany("DELETE FROM metadata WHERE namespace = ? AND key = ?", rows)

    def all(self, namespace: str) -> dict[str, bytes]:
        with self._locked() as connection:
            rows = connection.execute(
                "SELECT key, value FROM metadata WHERE namespace = ? ORDER BY key", (namespace,)
            ).fetchall()
        return {key: bytes(value) for key, value in rows}

    def compare_and_put(
        self,
        namespace: str,
        key: str,
        value: bytes,
        expected: Mapping[tuple[str, str], bytes | None],
    ) -> bool:
        with self._locked() as connection, _transaction(connection) as transaction:
            for (expected_namespace, expected_key), expected_value in expected.items():
                row = connection.execute(
                    "SELECT value FROM metadata WHERE namespace = ? AND key = ?", (expected_namespace, expected_key)
                ).fetchone()
                current = None if row is None else bytes(row[0])
                wanted = None if expected_value is None else bytes(expected_value)
                if current != wanted:
                    transaction.refuse()
                    return False
            connection.execute(
                "INSERT OR REPLACE INTO metadata (namespace, key, value) VALUES (?, ?, ?)",
                (namespace, key, bytes(value)),
            )
        return True

    def close(self) -> None:
        """Close this process's connection; the store reopens it if used again."""
        if self._pid != os.getpid():
            self._reset()
            return
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


class _Transaction:
    def __init__(self) -> None:
        self.refused = False

    def refuse(self) -> None:
        self.refused = True


@contextmanager
def _transaction(connection: sqlite3.Connection) -> Iterator[_Transaction]:
    """``BEGIN IMMEDIATE`` ... ``COMMIT``; rolled back on an exception or when refused."""
    connection.execute("BEGIN IMMEDIATE")
    transaction = _Transaction()
    try:
        yield transaction
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("ROLLBACK" if transaction.refused else "COMMIT")


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

    def get_metadata_store(self, config: Config) -> MetadataStore:
        path = metadata_store_path(config)
        path.parent.mkdir(parents=True, exist_ok=True)
        return SqliteMetadataStore(path)
