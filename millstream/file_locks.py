"""Who holds a file lock on this host, and in what state: from the kernel's lock table and process table (Linux
``/proc``), so that a process waiting for a lock can name the holder, and break it where it may."""

from __future__ import annotations

import os
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


def flock_holder_pid(path: Path, locks_table: Path = LOCKS_TABLE) -> int | None:
    """The pid of the process on this host holding an exclusive ``flock`` of ``path``, from the kernel's lock
    table; None where there is none, or no such table (not Linux), or the file is not here. The kernel names the
    process that took the lock (a child that inherited the descriptor holds it too)."""
    try:
        stat = os.stat(path)
        table = locks_table.read_text()
    except OSError:
        return None
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "2: FLOCK  ADVISORY  WRITE 21962 fe:00:9997433 0 EOF" (a waiter's line starts "2: -> FLOCK ...")
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == "WRITE" and fields[5] == device:
            return int(fields[4])
    return None
