"""An attempt of a container owns its tasks' store directories; a zombie attempt never touches them.

A superseded attempt (an older attempt of the container, or a container of an older generation) may
keep running for a while: a Spark task that hangs, a host cut off from the driver. Two things keep it
away from the new attempt's files:

* **Each attempt works in its own directory.** A store's engine opens ``<task>@<generation>.<epoch>``
  (``layout.attempt_dir``), never the directory of another attempt, so a zombie's RocksDB — its flushes,
  compactions and deletion of obsolete files, which it does by file name — can only reach its own files.
  Nothing is lost by it: a restart never trusts the previous current directory anyway (logged stores
  are restored, unlogged ones start empty). The new owner deletes the other attempts' directories.
* **Checkpoint directories are shared, so their operations are fenced.** ``<task>-<CheckpointId>``
  directories outlive attempts (a restart reuses the newest local checkpoint), so creating, completing
  and cleaning them up happen under an exclusive lock of ``<task>@owner``, which names the owning
  attempt: the new attempt claims it before its restore touches anything, and a zombie's next snapshot or
  cleanup that would create or delete a directory finds a newer owner and raises
  ``StoreDirectoryFencedError`` instead of deleting the new attempt's checkpoints. A commit that does neither
  takes no lock: nothing to fence, and its checkpoint write is fenced anyway.

The lock is ``flock`` on the owner file: two attempts on one host (or two containers in one process)
exclude each other; a store base on a shared network file system is not supported by Samza either. It is held
for moments (a checkpoint directory made or deleted), so a waiter polls for it and says whom it waits for every
``WARN_EVERY_S``. A holder that is *stopped* (``SIGSTOP``, a frozen process) would keep it for as long as it is
stopped, and the next attempt on the host would hang at its claim: so a waiter ends a stopped holder's process
(``SIGKILL``) unless the owner file names that process as an attempt at least as new as the waiter. A stopped
holder is an earlier attempt that the waiter supersedes (fencing it is what the claim is for) or a process of
no attempt; the kernel's lock table names it (Linux ``/proc/locks``), and the claim records each owner's pid and
host.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import orjson

from millstream.contracts.metadata import FencedError
from millstream.contracts.systems import WriterToken
from millstream.file_locks import flock_holder_pid, process_state
from millstream.files import sync_dir
from millstream.storage.layout import LIVE, OWNER_SUFFIX, StoreDirListing, base_dir, delete_path, stale_attempt_dirs

log = logging.getLogger(__name__)

T = TypeVar("T")

WARN_EVERY_S = 10.0
"""How often a waiter for the owner lock says whom it waits for."""

POLL_S = (0.002, 0.1)
"""The first and the longest pause between two tries of the owner lock (doubling in between)."""


class StoreDirectoryFencedError(FencedError):
    """A newer attempt owns the store directory: this attempt is a zombie and must not touch it."""

    def __init__(self, directory: Path, writer: WriterToken, owner: tuple[int, int]) -> None:
        self.directory = directory
        self.writer = writer
        super().__init__(
            f"store directory '{directory}': {writer.describe()} was fenced off; attempt {owner[1]} of "
            f"generation {owner[0]} owns it now (if the job's metadata store was deleted and recreated, delete "
            f"'{directory}{OWNER_SUFFIX}' and the store directories with it)"
        )


def owner_file(store_dir: Path) -> Path:
    return base_dir(store_dir).with_name(base_dir(store_dir).name + OWNER_SUFFIX)


@contextlib.contextmanager
def owned(store_dir: Path, writer: WriterToken | None, *, claim: bool = False) -> Iterator[None]:
    """Run the block while ``writer`` owns ``store_dir``'s directories, holding the owner lock.

    With ``claim`` a writer at least as new as the recorded owner records itself as the owner. Raises
    ``StoreDirectoryFencedError`` when a newer attempt owns them. Without a writer (tools, tests of a
    store without a container) there is no owner to check."""
    if writer is None:
        yield
        return
    path = owner_file(store_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as file:
        _lock(file.fileno(), path, writer)
        file.seek(0)
        owner = _owner(file.read())
        if owner is not None and owner > writer.order:
            raise StoreDirectoryFencedError(base_dir(store_dir), writer, owner)
        if claim and owner != writer.order:
            file.seek(0)
            file.truncate()
            record = {
                "generation": writer.generation,
                "epoch": writer.epoch,
                "container": writer.container_id,
                "pid": os.getpid(),
                "host": socket.gethostname(),
            }
            file.write(orjson.dumps(record))
            file.flush()
            os.fsync(file.fileno())
            sync_dir(path.parent)
        yield


def claim(store_dir: Path, writer: WriterToken | None, listing: StoreDirListing = LIVE) -> None:
    """Take ``store_dir``'s directories for ``writer`` and delete every other attempt's working directory
    (a zombie still working in one fails at its next write there), as ``listing`` finds them."""
    with owned(store_dir, writer, claim=True):
        if writer is not None:
            for stale in stale_attempt_dirs(store_dir, listing):
                delete_path(stale)


def _lock(descriptor: int, path: Path, writer: WriterToken) -> None:
    """Take the exclusive ``flock`` of the owner file ``path`` (open as ``descriptor``): at once when it is free,
    else polling, naming the holder every ``WARN_EVERY_S``, and ending a stopped holder that may be ended
    (``may_end_holder``) rather than waiting for it forever."""
    pause, waited_since, warned_at = POLL_S[0], time.monotonic(), time.monotonic()
    while True:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        holder = flock_holder_pid(path)
        state = process_state(holder) if holder is not None else ""
        if holder is not None and state == "stopped" and may_end_holder(path, holder, writer):
            log.error(
                "store owner lock '%s': held by pid %d, which is stopped and not a newer attempt than %s; ending it",
                path, holder, writer.describe(),
            )  # fmt: skip
            _end(holder)
            continue
        now = time.monotonic()
        if now - warned_at >= WARN_EVERY_S:
            warned_at = now
            named = f"pid {holder} ({state or 'state unknown'})" if holder is not None else "a process not named here"
            log.warning(
                "store owner lock '%s': %s has waited %.0f s for it, held by %s",
                path, writer.describe(), now - waited_since, named,
            )  # fmt: skip
        time.sleep(pause)
        pause = min(pause * 2, POLL_S[1])


def may_end_holder(path: Path, holder: int, writer: WriterToken) -> bool:
    """Whether ``writer`` may end the stopped ``holder`` of ``path``'s lock: not this process, and not the owner
    the file names when that owner is at least as new as ``writer`` (read without the lock: a record being
    written reads as no owner)."""
    if holder == os.getpid():
        return False
    try:
        raw = path.read_bytes()
    except OSError:
        return True
    owner, process = _owner(raw), _owner_process(raw)
    return owner is None or process != (holder, socket.gethostname()) or owner < writer.order


def _end(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile: the lock is free
        os.kill(pid, signal.SIGKILL)


def _owner(raw: bytes) -> tuple[int, int] | None:
    """The recorded owner's ``(generation, epoch)``; None when unclaimed or unreadable (a crash while
    claiming), which the next claim overwrites."""
    return _recorded(raw, lambda document: (int(document["generation"]), int(document["epoch"])))


def _owner_process(raw: bytes) -> tuple[int, str] | None:
    """The recorded owner's ``(pid, host)``; None when unreadable or recorded before owners named theirs."""
    return _recorded(raw, lambda document: (int(document["pid"]), str(document["host"])))


def _recorded(raw: bytes, read: Callable[[Any], T]) -> T | None:
    try:
        return read(orjson.loads(raw))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
