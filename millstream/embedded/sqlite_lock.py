"""Who holds the SQLite metadata store's write lock, and how long a waiter lets them hold it.

SQLite's write lock is a file lock: no other process can take it away, and a process that is stopped
(``SIGSTOP``, a frozen VM) keeps it for as long as it is stopped. So every writer, right after it takes the
lock, writes a *holder record* beside the database (``<file>-writer``: container, attempt, pid, host, since),
and a writer that waits reads it to say whom it waits for.

:class:`LockLease` is the waiting rule, sans-IO (times come from the caller's clock): a holder is given the
lease (``metadata.store.lock.lease.ms``) measured on the *waiter's* clock from when the waiter first found
that same holder in the way, so hosts' clocks never matter and the lease is never shorter than configured.
While the lease runs, the waiter waits and names the holder. Once it has expired, a writer that may break the
lock (the job's newest driver: a superseding ``millstream run``) ends the holder's process when this host can
prove that process holds the lock (Linux ``/proc/locks``); any other writer, or a holder it cannot prove or
reach (another host on a shared filesystem), gets an error naming the holder.
"""

from __future__ import annotations

import enum
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from millstream.file_locks import LOCKS_TABLE, held_locks

WAL_WRITE_LOCK_BYTE = 120
"""The byte of the ``-shm`` file SQLite's unix VFS locks for WAL's single writer (``(22 + 8) * 4``)."""


@dataclass(frozen=True)
class LockHolder:
    """A process that took the metadata store's write lock; ``writer`` says which part of the job it is
    (``container 0 attempt 2``, ``the driver``), empty for a process that did not say."""

    pid: int
    host: str
    since: str
    writer: str = ""

    @property
    def identity(self) -> tuple[int, str, str]:
        """The same hold: one process's one acquisition (a new ``since`` is a new hold)."""
        return (self.pid, self.host, self.since)

    def describe(self) -> str:
        who = f"{self.writer} " if self.writer else ""
        return f"{who}pid {self.pid} on host {self.host} since {self.since}"

    def to_bytes(self) -> bytes:
        return orjson.dumps({"writer": self.writer, "pid": self.pid, "host": self.host, "since": self.since})

    @classmethod
    def from_bytes(cls, raw: bytes) -> LockHolder | None:
        try:
            record = orjson.loads(raw)
            return cls(int(record["pid"]), str(record["host"]), str(record["since"]), str(record.get("writer", "")))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return None


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def this_holder(writer: str) -> LockHolder:
    return LockHolder(os.getpid(), socket.gethostname(), now_iso(), writer)


def holder_record_path(database: Path) -> Path:
    return database.with_name(f"{database.name}-writer")


RECORD_SIZE = 512
"""Every record is written as one ``pwrite`` of this many bytes at offset 0 (JSON padded with spaces): no
rename, no truncation, a few microseconds. A reader that catches a write half-done finds unreadable JSON and
treats the record as missing for that round."""


class HolderRecordWriter:
    """One process's writer of the holder record: the file stays open (reopened after a fork)."""

    def __init__(self, database: Path) -> None:
        self.path = holder_record_path(database)
        self._fd: int | None = None
        self._pid = 0

    def write(self, holder: LockHolder) -> None:
        """Raises ``OSError``; a failure to write the record is not a failure of the write it describes, so
        the caller only logs it."""
        if self._fd is None or self._pid != os.getpid():
            self._fd, self._pid = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644), os.getpid()
        os.pwrite(self._fd, holder.to_bytes().ljust(RECORD_SIZE)[:RECORD_SIZE], 0)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


def write_holder_record(database: Path, holder: LockHolder) -> None:
    writer = HolderRecordWriter(database)
    try:
        writer.write(holder)
    finally:
        writer.close()


def read_holder_record(database: Path) -> LockHolder | None:
    try:
        return LockHolder.from_bytes(holder_record_path(database).read_bytes()[:RECORD_SIZE].rstrip())
    except OSError:
        return None


def local_write_lock_pid(database: Path, locks_table: Path = LOCKS_TABLE) -> int | None:
    """The pid of the process on this host that holds SQLite's WAL write lock on ``database``, from the
    kernel's lock table; None where there is none, or no such table (not Linux), or the file is not here."""
    for lock in held_locks(database.with_name(f"{database.name}-shm"), locks_table):
        covers = lock.start <= WAL_WRITE_LOCK_BYTE and (lock.end is None or lock.end >= WAL_WRITE_LOCK_BYTE)
        if lock.kind == "POSIX" and lock.access == "WRITE" and covers:
            return lock.pid
    return None


class Decision(enum.Enum):
    WAIT = "wait"
    """The lease runs: keep waiting, naming the holder."""
    BREAK = "break"
    """The lease expired and this writer may break the lock."""
    GIVE_UP = "give-up"
    """The lease expired and this writer may not break it: fail, naming the holder."""


class LockLease:
    """One waiting writer's view of one holder's lease (sans-IO: ``now_ms`` is the caller's monotonic clock).

    The lease starts when this waiter first finds a holder in its way and restarts whenever a different hold
    (another process, or a new acquisition) is found, so a lock that changes hands is contention, never
    expiry. ``may_break``: this writer is the job's newest driver.
    """

    def __init__(self, lease_ms: int, *, may_break: bool) -> None:
        self.lease_ms = lease_ms
        self.may_break = may_break
        self._seen = False
        self._hold: tuple[int, str, str] | None = None
        self._first_seen_ms = 0

    def observe(self, now_ms: int, holder: LockHolder | None) -> Decision:
        """A round of waiting for the lock ended without it, and ``holder`` (None: no record, and none found in
        this host's lock table) was found holding it at ``now_ms``. The lease of a hold seen for the first time
        starts now, so it is never shorter than configured (it may be longer by up to one round)."""
        identity = holder.identity if holder is not None else None
        if not self._seen or self._hold != identity:
            self._seen, self._hold, self._first_seen_ms = True, identity, now_ms
        if now_ms - self._first_seen_ms < self.lease_ms:
            return Decision.WAIT
        return Decision.BREAK if self.may_break else Decision.GIVE_UP

    def remaining_ms(self, now_ms: int) -> int:
        return max(0, self._first_seen_ms + self.lease_ms - now_ms)
