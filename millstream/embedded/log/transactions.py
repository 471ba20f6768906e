"""The transaction coordinator of a log system: one SQLite file, ``<root>/.transactions.db``, beside the streams.

Exactly-once on the embedded log (``task.processing.guarantee=exactly-once``) writes a container's appends to
any number of partitions and its tasks' checkpoints as one transaction (the rules are in ``txn_protocol``):

1. ``register`` records the container's attempt as its job's writer (fencing older attempts and generations,
   like a Kafka producer taking over its ``transactional.id``) and returns what it must roll forward or abort.
2. ``begin`` opens a transaction; ``add_partition`` records each partition before the first append to it
   under the transaction (Kafka's ``AddPartitionsToTxn``), so whoever ends the transaction later knows every
   partition that may hold its batches. The appends themselves go to the partition files, as ``pending``
   batches that no reader sees (``storage``).
3. ``commit`` is the commit point: in one SQLite transaction of this file it checks that the writer is still
   current, stores the checkpoints and marks the transaction committed. A crash before it leaves nothing
   visible; a crash after it leaves a committed transaction that the next ``register`` of the job publishes.
4. The producer then publishes the batches in each partition and ``forget`` deletes the transaction's rows.
5. A transaction open past its deadline (``begin`` sets it ``transaction.timeout.ms`` ahead) is aborted by
   whoever finds it first (``expire``, ``register``, or its writer's ``commit``, which then raises
   ``TransactionTimedOutError``); the abort retires the writer's attempt in the same SQLite transaction and
   ``expired`` keeps, per container, which attempt and transaction timed out, so its writer is told why.

Checkpoints live here too (``checkpoints``: the last one per job, task and version), whatever the guarantee,
when ``task.checkpoint.factory=log``: at-least-once writes them directly (``put_checkpoint``, fenced the same
way). Every method is one short SQLite transaction; WAL lets readers go on while a writer commits.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.embedded.log.errors import LogSystemError, TransactionTimedOutError
from millstream.embedded.log.txn_protocol import (
    NEVER,
    TxnRecord,
    TxnState,
    commit_outcome,
    expiry_outcome,
    fenced_by,
    recovery,
    retired,
)

FILE_NAME = ".transactions.db"
BUSY_TIMEOUT_MS = 30_000
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS writers (job TEXT NOT NULL, container TEXT NOT NULL, generation INTEGER NOT NULL,
    epoch INTEGER NOT NULL, PRIMARY KEY (job, container));
CREATE TABLE IF NOT EXISTS transactions (txn INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL,
    container TEXT NOT NULL, generation INTEGER NOT NULL, epoch INTEGER NOT NULL, state INTEGER NOT NULL,
    deadline INTEGER NOT NULL DEFAULT {NEVER});
CREATE TABLE IF NOT EXISTS members (txn INTEGER NOT NULL, stream TEXT NOT NULL, partition INTEGER NOT NULL,
    PRIMARY KEY (txn, stream, partition));
CREATE TABLE IF NOT EXISTS checkpoints (job TEXT NOT NULL, task TEXT NOT NULL, version INTEGER NOT NULL,
    value BLOB NOT NULL, written_at INTEGER NOT NULL, PRIMARY KEY (job, task, version));
CREATE TABLE IF NOT EXISTS expired (job TEXT NOT NULL, container TEXT NOT NULL, generation INTEGER NOT NULL,
    epoch INTEGER NOT NULL, txn INTEGER NOT NULL, PRIMARY KEY (job, container));
"""
_RECORD = "SELECT txn, container, generation, epoch, state, deadline, job FROM transactions"
_RETIRE = (
    "INSERT INTO writers (job, container, generation, epoch) VALUES (?1, ?2, ?3, ?4) "
    "ON CONFLICT (job, container) DO UPDATE SET generation = ?3, epoch = ?4 WHERE (generation, epoch) < (?3, ?4)"
)

Member = tuple[str, int]
"""``(stream, partition)`` a transaction appended to."""
StoredCheckpoint = tuple[str, int, bytes, int]
"""``(task, version, serialized checkpoint, written at ms)``."""


def wall_clock_ms() -> int:
    """Milliseconds since the epoch: deadlines are compared across the processes sharing the log's files."""
    return time.time_ns() // 1_000_000


class Ending(NamedTuple):
    """A transaction to end in each of its partitions (publish or discard), then ``forget``."""

    txn: int
    commit: bool
    members: list[Member]
    retire: WriterToken | None
    """Set for a transaction aborted by its timeout: the attempt to record as its container's writer in each
    partition while discarding there (``txn_protocol.retired``), so its writer appends nothing more there."""


class TransactionLog:
    """The coordinator file of one log system; one thread at a time."""

    def __init__(
        self, root: Path, system: str, *, fsync: bool = False, clock: Callable[[], int] = wall_clock_ms
    ) -> None:
        """Open (creating it if missing) the coordinator of the log under ``root``. As the partition files:
        ``synchronous=NORMAL`` (a commit survives a crash of the process), ``FULL`` with ``fsync`` (it also
        survives power loss). ``clock`` gives wall-clock milliseconds: deadlines and checkpoint times."""
        self.path = root / FILE_NAME
        self.system = system
        self.clock = clock
        root.mkdir(parents=True, exist_ok=True)
        try:
            self._connection = sqlite3.connect(
                str(self.path), isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
            self._connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self._connection.execute("PRAGMA journal_mode = WAL")
            self._connection.execute(f"PRAGMA synchronous = {'FULL' if fsync else 'NORMAL'}")
            self._connection.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
            columns = {row[1] for row in self._connection.execute("PRAGMA table_info(transactions)")}
            if "deadline" not in columns:  # a file from before transaction timeouts
                add = f"ALTER TABLE transactions ADD COLUMN deadline INTEGER NOT NULL DEFAULT {NEVER}"
                self._connection.execute(add)
        except sqlite3.Error as error:
            raise self._error(f"cannot open the transaction coordinator: {error}") from None

    def close(self) -> None:
        self._connection.close()

    def _error(self, detail: str) -> LogSystemError:
        return LogSystemError(f"log system '{self.system}': {detail} (file '{self.path}')")

    @contextmanager
    def _write(self, what: str) -> Iterator[sqlite3.Connection]:
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise self._error(f"cannot {what}: {error}") from None

    def _check(self, connection: sqlite3.Connection, writer: WriterToken, record: bool = False) -> None:
        """Inside a write: refuse a fenced ``writer``; with ``record``, record it as its container's writer."""
        rows = connection.execute(
            "SELECT container, generation, epoch FROM writers WHERE job = ?", (writer.job,)
        ).fetchall()
        why = fenced_by(rows, writer)
        if why is not None:
            raise WriterFencedError(f"log system '{self.system}' transactions", writer, f"{why}; file '{self.path}'")
        if record:
            connection.execute(
                "INSERT OR REPLACE INTO writers (job, container, generation, epoch) VALUES (?, ?, ?, ?)",
                (writer.job, writer.container_id, writer.generation, writer.epoch),
            )

    def register(self, writer: WriterToken) -> list[Ending]:
        """Record ``writer`` as current (fencing older attempts and generations), abort the job's transactions
        past their deadline; return the transactions it must end (``txn_protocol.recovery``)."""
        now = self.clock()
        with self._write(f"register {writer.describe()}") as connection:
            self._check(connection, writer, record=True)
            rows = connection.execute(f"{_RECORD} WHERE job = ? ORDER BY txn", (writer.job,)).fetchall()
            records = [_record(row) for row in rows]
            for record in records:
                if expiry_outcome(record, now) is not record.state:
                    self._abort_expired(connection, writer.job, record)
        return [
            Ending(txn, commit, self.members(txn), None if commit else self._retired(writer.job, txn))
            for txn, commit in recovery(records, writer, now)
        ]

    def _abort_expired(self, connection: sqlite3.Connection, job: str, record: TxnRecord) -> None:
        """Inside a write: abort ``record`` by its timeout and retire its writer's attempt."""
        connection.execute("UPDATE transactions SET state = ? WHERE txn = ?", (int(TxnState.ABORTED), record.txn))
        container, generation, epoch = retired(record.writer)
        connection.execute(_RETIRE, (job, container, generation, epoch))
        connection.execute(
            "INSERT OR REPLACE INTO expired (job, container, generation, epoch, txn) VALUES (?, ?, ?, ?, ?)",
            (job, record.container, record.generation, record.epoch, record.txn),
        )

    @staticmethod
    def _retire_token(job: str, record: TxnRecord) -> WriterToken:
        """The token that retires ``record``'s writer in its partitions (``txn_protocol.retired``)."""
        container, generation, epoch = retired(record.writer)
        return WriterToken(job, container, generation, epoch)

    def _retired(self, job: str, txn: int) -> WriterToken | None:
        row = self._connection.execute(f"{_RECORD} WHERE txn = ?", (txn,)).fetchone()
        return None if row is None else self._retire_token(job, _record(row))

    def expire(self, txn: int) -> tuple[TxnRecord | None, WriterToken | None]:
        """Abort ``txn`` when it is open past its deadline (a reader or the admin found it holding a partition's
        stable end). Returns the transaction as it stands afterwards (None: ended and forgotten) and, when it is
        aborted, the token to retire its writer with in each partition (``Ending.retire``). Only reads, unless
        the transaction is due; then the check and the abort are one write, against the writer's commit."""
        found = self._connection.execute(f"{_RECORD} WHERE txn = ?", (txn,)).fetchone()
        if found is not None and expiry_outcome(_record(found), self.clock()) is not _record(found).state:
            with self._write(f"abort transaction {txn} past its timeout") as connection:
                found = connection.execute(f"{_RECORD} WHERE txn = ?", (txn,)).fetchone()
                if found is not None and expiry_outcome(_record(found), self.clock()) is not _record(found).state:
                    self._abort_expired(connection, found[6], _record(found))
                    found = connection.execute(f"{_RECORD} WHERE txn = ?", (txn,)).fetchone()
        if found is None:
            return None, None
        record = _record(found)
        return record, self._retire_token(found[6], record) if record.state is TxnState.ABORTED else None

    def members(self, txn: int) -> list[Member]:
        rows = self._connection.execute(
            "SELECT stream, partition FROM members WHERE txn = ? ORDER BY stream, partition", (txn,)
        ).fetchall()
        return [(stream, int(partition)) for stream, partition in rows]

    def begin(self, writer: WriterToken, member: Member | None = None, *, timeout_ms: int = NEVER) -> int:
        """Open a transaction for ``writer`` (refused once fenced), with the partition ``member`` it appends to
        first, in one step; its id. It times out ``timeout_ms`` from now."""
        deadline = min(self.clock() + timeout_ms, NEVER)
        with self._write(f"begin a transaction of {writer.describe()}") as connection:
            self._check(connection, writer)
            cursor = connection.execute(
                "INSERT INTO transactions (job, container, generation, epoch, state, deadline) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (writer.job, writer.container_id, writer.generation, writer.epoch, int(TxnState.OPEN), deadline),
            )
            txn = cursor.lastrowid
            assert txn is not None
            if member is not None:
                connection.execute("INSERT INTO members VALUES (?, ?, ?)", (txn, *member))
        return txn

    def add_partition(self, txn: int, writer: WriterToken, stream: str, partition: int) -> None:
        """Record that ``txn`` appends to ``stream``'s ``partition``, before it does; refused once fenced."""
        with self._write(f"add {stream} partition {partition} to transaction {txn}") as connection:
            self._refuse_timed_out(connection, txn, writer)
            self._check(connection, writer)
            self._require_open(connection, txn, writer)
            connection.execute("INSERT OR IGNORE INTO members VALUES (?, ?, ?)", (txn, stream, partition))

    def _require_open(self, connection: sqlite3.Connection, txn: int, writer: WriterToken) -> None:
        row = connection.execute("SELECT state FROM transactions WHERE txn = ?", (txn,)).fetchone()
        if row is None or row[0] != TxnState.OPEN:
            raise WriterFencedError(
                f"log system '{self.system}' transaction {txn}", writer, "it was aborted by a newer attempt"
            )

    def _refuse_timed_out(self, connection: sqlite3.Connection, txn: int, writer: WriterToken) -> None:
        """Inside a write: ``TransactionTimedOutError`` when ``txn`` of ``writer`` was aborted by its timeout."""
        row = connection.execute(
            "SELECT txn FROM expired WHERE job = ? AND container = ? AND generation = ? AND epoch = ?",
            (writer.job, writer.container_id, writer.generation, writer.epoch),
        ).fetchone()
        if row is not None and int(row[0]) == txn:
            raise TransactionTimedOutError(self.system, txn, writer, self.path)

    def timed_out(self, writer: WriterToken) -> int | None:
        """The transaction of ``writer``'s attempt that was aborted by its timeout, if one was."""
        row = self._connection.execute(
            "SELECT txn FROM expired WHERE job = ? AND container = ? AND generation = ? AND epoch = ?",
            (writer.job, writer.container_id, writer.generation, writer.epoch),
        ).fetchone()
        return None if row is None else int(row[0])

    def commit(self, txn: int, writer: WriterToken, checkpoints: Mapping[tuple[str, int], bytes]) -> None:
        """The commit point: the checkpoints (``(task, version)`` → serialized) stored and ``txn`` committed in
        one SQLite transaction, or nothing: ``WriterFencedError`` once ``writer`` is fenced, and
        ``TransactionTimedOutError`` once ``txn`` is past its deadline (then this call aborts it, if nobody did)."""
        now = self.clock()
        with self._write(f"commit transaction {txn} of {writer.describe()}") as connection:
            self._refuse_timed_out(connection, txn, writer)
            self._check(connection, writer)
            row = connection.execute(f"{_RECORD} WHERE txn = ?", (txn,)).fetchone()
            outcome = None if row is None else commit_outcome(_record(row), now)
            if outcome is None:
                self._require_open(connection, txn, writer)
            elif outcome is TxnState.ABORTED:
                self._abort_expired(connection, writer.job, _record(row))
            else:
                self._store(connection, writer.job, checkpoints, now)
                connection.execute("UPDATE transactions SET state = ? WHERE txn = ?", (int(TxnState.COMMITTED), txn))
        if outcome is TxnState.ABORTED:
            raise TransactionTimedOutError(self.system, txn, writer, self.path)

    @staticmethod
    def _store(
        connection: sqlite3.Connection, job: str, checkpoints: Mapping[tuple[str, int], bytes], now: int
    ) -> None:
        connection.executemany(
            "INSERT OR REPLACE INTO checkpoints (job, task, version, value, written_at) VALUES (?, ?, ?, ?, ?)",
            [(job, task, version, value, now) for (task, version), value in checkpoints.items()],
        )

    def forget(self, txn: int) -> None:
        """Delete an ended transaction: every partition published or discarded it."""
        with self._write(f"forget transaction {txn}") as connection:
            connection.execute("DELETE FROM members WHERE txn = ?", (txn,))
            connection.execute("DELETE FROM transactions WHERE txn = ?", (txn,))

    def open_transactions(self, job: str) -> list[int]:
        """The job's transactions not yet ended (for tools and tests)."""
        rows = self._connection.execute("SELECT txn FROM transactions WHERE job = ? ORDER BY txn", (job,)).fetchall()
        return [int(row[0]) for row in rows]

    # --- checkpoints -------------------------------------------------------------------------------

    def put_checkpoint(self, writer: WriterToken, task: str, version: int, value: bytes) -> None:
        """At-least-once: store a checkpoint now, unless ``writer`` is fenced (it is recorded as current)."""
        self.put_checkpoints(writer, {(task, version): value})

    def put_checkpoints(self, writer: WriterToken, checkpoints: Mapping[tuple[str, int], bytes]) -> None:
        """At-least-once: store a batch of checkpoints (``(task, version)`` → serialized) in one SQLite
        transaction, unless ``writer`` is fenced (it is recorded as current): a commit round's group at once."""
        tasks = sorted({task for task, _ in checkpoints})
        what = f"task '{tasks[0]}'" if len(tasks) == 1 else f"{len(tasks)} tasks ({', '.join(tasks[:10])}...)"
        with self._write(f"write the checkpoints of {what}") as connection:
            self._check(connection, writer, record=True)
            self._store(connection, writer.job, checkpoints, self.clock())

    def checkpoints(self, job: str, task: str | None = None) -> list[StoredCheckpoint]:
        """The job's stored checkpoints (of one task), oldest write first."""
        query = "SELECT task, version, value, written_at FROM checkpoints WHERE job = ?"
        parameters: tuple[str, ...] = (job,)
        if task is not None:
            query += " AND task = ?"
            parameters = (job, task)
        rows = self._connection.execute(f"{query} ORDER BY written_at, version", parameters).fetchall()
        return [(str(task), int(version), bytes(value), int(written)) for task, version, value, written in rows]

    def clear_checkpoints(self, job: str) -> None:
        with self._write(f"clear the checkpoints of job '{job}'") as connection:
            connection.execute("DELETE FROM checkpoints WHERE job = ?", (job,))


def _record(row: tuple[int, str, int, int, int, int, str]) -> TxnRecord:
    """A row of ``_RECORD`` as the rules see it."""
    txn, container, generation, epoch, state, deadline, _ = row
    return TxnRecord(int(txn), str(container), int(generation), int(epoch), TxnState(state), int(deadline))
