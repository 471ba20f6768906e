"""Who holds a file lock on this host, and in what state: from the kernel's lock table and process table (Linux
``/proc``), so that a process waiting for a lock can name the holder, and break it where it may."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LOCKS_TABLE = Path("/proc/locks")


def process_state(pid: int) -> str:
    """``stopped``, ``running``... from ``/proc/<pid>/stat`` when this host has it; empty when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    code = stat.rsplit(")", 1)[-1].split()[0]
    return {"T": "stopped", "t": "stopped", "R": "running", "S": "sleeping", "D": "in I/O", "Z": "exiting"}.get(
        code, code
    )


@dataclass(frozen=True)
class HeldLock:
    """A lock the kernel's lock table lists as held (not waited for) on a file."""

    kind: str
    """``FLOCK``, ``POSIX`` (a record lock, ``fcntl``) or ``OFDLCK``."""
    access: str
    """``READ`` or ``WRITE``."""
    pid: int
    """The process that took it (a child that inherited the descriptor holds it too)."""
    start: int
    end: int | None
    """The last byte locked; None: to the end of the file."""


def held_locks(path: Path, locks_table: Path = LOCKS_TABLE) -> list[HeldLock]:
    """The locks held on ``path`` on this host, from the kernel's lock table; none where there is no such table
    (not Linux), or the file is not here."""
    try:
        stat = os.stat(path)
        table = locks_table.read_text()
    except OSError:
        return []
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    held = []
    for line in table.splitlines():
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 21962 fe:00:9997433 120 120" (a waiter's line reads "1: -> POSIX ...")
        if len(fields) >= 8 and fields[1] != "->" and fields[5] == device:
            end = None if fields[7] == "EOF" else int(fields[7])
            held.append(HeldLock(fields[1], fields[3], int(fields[4]), int(fields[6]), end))
    return held


def flock_holder_pid(path: Path, locks_table: Path = LOCKS_TABLE) -> int | None:
    """The pid of the process on this host holding an exclusive ``flock`` of ``path``; None where there is none
    (or ``held_locks`` cannot tell)."""
    for lock in held_locks(path, locks_table):
        if lock.kind == "FLOCK" and lock.access == "WRITE":
            return lock.pid
    return None
