"""Who holds a file lock on this host: the kernel's lock table read for a ``flock``, and a process's state."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from millstream.file_locks import flock_holder_pid, process_state


def test_the_holder_of_an_exclusive_flock_is_named_by_pid(tmp_path: Path) -> None:
    path = tmp_path / "Partition_0@owner"
    path.write_bytes(b"")
    assert flock_holder_pid(path) is None
    with open(path, "rb") as file:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX)
        assert flock_holder_pid(path) == os.getpid()
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)
    assert flock_holder_pid(path) is None


def test_only_an_exclusive_flock_of_that_very_file_counts(tmp_path: Path) -> None:
    path = tmp_path / "owner"
    path.write_bytes(b"")
    stat = os.stat(path)
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}"
    table = tmp_path / "locks"
    table.write_text(
        f"1: -> FLOCK  ADVISORY  WRITE 10 {device}:{stat.st_ino} 0 EOF\n"  # waiting for it
        f"1: POSIX  ADVISORY  WRITE 11 {device}:{stat.st_ino} 0 EOF\n"  # a record lock, not a flock
        f"2: FLOCK  ADVISORY  READ  12 {device}:{stat.st_ino} 0 EOF\n"  # shared
        f"3: FLOCK  ADVISORY  WRITE 13 {device}:{stat.st_ino + 1} 0 EOF\n"  # another file
        f"4: FLOCK  ADVISORY  WRITE 14 {device}:{stat.st_ino} 0 EOF\n"
    )
    assert flock_holder_pid(path, table) == 14
    assert flock_holder_pid(tmp_path / "missing", table) is None
    assert flock_holder_pid(path, tmp_path / "no-table") is None


def test_a_process_state_reads_running_for_this_one_and_empty_for_none() -> None:
    assert process_state(os.getpid()) == "running"
    assert process_state(2**22 + 1) == ""
