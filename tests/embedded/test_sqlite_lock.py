"""The waiting rule for the SQLite metadata store's write lock (a holder's lease on the waiter's clock), the
holder record, and finding the holder in the kernel's lock table."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from millstream.embedded.sqlite import MetadataStoreError, SqliteLockSettings, SqliteMetadataStore
from millstream.embedded.sqlite_lock import (
    Decision,
    LockHolder,
    LockLease,
    local_write_lock_pid,
    read_holder_record,
    write_holder_record,
)

HOLDER = LockHolder(pid=41, host="h1", since="2026-11-28T10:00:00.000Z", writer="container 0 attempt 2")


def test_a_waiter_waits_while_the_holders_lease_runs_counted_from_when_it_first_finds_that_holder():
    lease = LockLease(10_000, may_break=True)
    assert lease.observe(5_000, HOLDER) is Decision.WAIT
    assert lease.remaining_ms(5_000) == 10_000
    assert lease.observe(14_999, HOLDER) is Decision.WAIT
    assert lease.remaining_ms(14_999) == 1
    assert lease.observe(15_000, HOLDER) is Decision.BREAK


def test_a_lock_that_changes_hands_restarts_the_lease():
    lease = LockLease(10_000, may_break=True)
    assert lease.observe(0, HOLDER) is Decision.WAIT
    again = LockHolder(HOLDER.pid, HOLDER.host, "2026-11-28T10:00:09.000Z", HOLDER.writer)
    assert lease.observe(9_000, again) is Decision.WAIT
    assert lease.observe(18_999, again) is Decision.WAIT
    assert lease.observe(19_000, again) is Decision.BREAK
    assert lease.observe(19_500, HOLDER) is Decision.WAIT


def test_past_the_lease_only_a_writer_that_may_break_breaks():
    container = LockLease(1_000, may_break=False)
    assert container.observe(0, None) is Decision.WAIT
    assert container.observe(999, None) is Decision.WAIT
    assert container.observe(1_000, None) is Decision.GIVE_UP


def test_a_holder_is_described_by_writer_pid_host_and_since():
    assert HOLDER.describe() == "container 0 attempt 2 pid 41 on host h1 since 2026-11-28T10:00:00.000Z"
    assert LockHolder(7, "h", "t").describe() == "pid 7 on host h since t"


def test_the_holder_record_round_trips_and_an_unreadable_one_is_none(tmp_path: Path):
    database = tmp_path / "metadata.db"
    assert read_holder_record(database) is None
    write_holder_record(database, HOLDER)
    assert read_holder_record(database) == HOLDER
    (tmp_path / "metadata.db-writer").write_bytes(b"{not json")
    assert read_holder_record(database) is None


def test_the_lock_table_names_the_process_holding_the_wal_write_byte(tmp_path: Path):
    database = tmp_path / "metadata.db"
    (tmp_path / "metadata.db-shm").write_bytes(b"")
    shm = os.stat(tmp_path / "metadata.db-shm")
    device = f"{os.major(shm.st_dev):02x}:{os.minor(shm.st_dev):02x}:{shm.st_ino}"
    table = tmp_path / "locks"
    table.write_text(
        f"1: POSIX  ADVISORY  READ 11 {device} 124 124\n"
        f"2: POSIX  ADVISORY  WRITE 12 00:01:{shm.st_ino + 1} 120 120\n"
        f"3: POSIX  ADVISORY  WRITE 13 {device} 120 120\n"
    )
    assert local_write_lock_pid(database, table) == 13
    table.write_text(f"1: POSIX  ADVISORY  WRITE 13 {device} 121 121\n")
    assert local_write_lock_pid(database, table) is None


def test_a_local_holder_that_wrote_no_record_is_named_from_the_lock_table(tmp_path: Path):
    database = tmp_path / "metadata.db"
    store = SqliteMetadataStore(database)
    store.init()
    write_holder_record(database, HOLDER)  # a stale record: another host's earlier hold
    raw = sqlite3.connect(database, isolation_level=None)
    try:
        raw.execute("BEGIN IMMEDIATE")
        holder = store.lock_holder()
        assert holder is not None and holder.pid == os.getpid() and "no holder record" in holder.since
        raw.execute("ROLLBACK")
        assert store.lock_holder() == HOLDER  # nobody holds it on this host: the record is all there is
    finally:
        raw.close()
        store.close()


def test_the_store_counts_the_lease_on_its_injected_clock_and_then_fails_naming_the_holder(tmp_path: Path):
    database = tmp_path / "metadata.db"
    ticks = iter(range(0, 1_000_000, 1_000))
    store = SqliteMetadataStore(database, SqliteLockSettings(lease_ms=3_000, wait_ms=20), clock_ms=lambda: next(ticks))
    store.init()
    raw = sqlite3.connect(database, isolation_level=None)
    try:
        raw.execute("BEGIN IMMEDIATE")
        with pytest.raises(MetadataStoreError, match=rf"held by pid {os.getpid()} on host .* past its lease"):
            store.put("ns", "k", b"v")
        rounds = next(ticks) // 1_000
        assert 4 <= rounds <= 6  # about lease / clock step rounds of 20 ms, not 3 s of real waiting
        raw.execute("ROLLBACK")
        store.put("ns", "k", b"v")
        assert store.get("ns", "k") == b"v"
    finally:
        raw.close()
        store.close()
