"""Where stores live on local disk, as in Samza.

``<base>/<store>/<task>`` is a task's current store; ``<base>/<store>/<task>-<CheckpointId>`` are its
checkpoints (RocksDB checkpoints: hard links to the SST files). ``<base>`` is
``job.logged.store.base.dir`` for stores with a backup and ``job.non-logged.store.base.dir`` for the
others. A checkpoint directory may also hold ``OFFSET-v2`` (the changelog offsets at that commit) and
``CHECKPOINT-V2`` (the commit's V2 checkpoint), which tell a restart what the directory contains;
they are written atomically (temporary file, fsync, rename) and never uploaded.

A container attempt's engines work in ``<base>/<store>/<task>@<generation>.<epoch>`` (``attempt_dir``), its
own directory, so a superseded attempt still running cannot write into or delete from the new attempt's
store; ``<task>@owner`` names the attempt that owns the task's directories (see ``ownership``). Checkpoint
directories keep the attempt-free name: a later attempt reuses them. ``@`` never occurs in a task's
directory name, so these names cannot collide with a task's.
"""

from __future__ import annotations

import bisect
import os
import re
import shutil
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import orjson

from millstream.checkpoint.checkpoint import CheckpointFormatError, CheckpointId, CheckpointV2
from millstream.config.settings import Settings
from millstream.errors import ConfigError, MillstreamError
from millstream.files import sync_dir
from millstream.model import SystemStreamPartition

OFFSET_FILE = "OFFSET"
OFFSET_V2_FILE = "OFFSET-v2"
SIDE_INPUT_OFFSETS_FILE = "SIDE-INPUT-OFFSETS"
CHECKPOINT_V2_FILE = "CHECKPOINT-V2"
LOCAL_CHECKPOINT_FILES = frozenset({OFFSET_FILE, OFFSET_V2_FILE, SIDE_INPUT_OFFSETS_FILE, CHECKPOINT_V2_FILE})
"""Files describing a checkpoint directory; never part of what a backend backs up or compares."""

ATTEMPT_SEPARATOR = "@"
OWNER_SUFFIX = "@owner"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def task_dir_name(task_name: str) -> str:
    """A task name as a directory name: Samza replaces spaces; we also replace anything unsafe."""
    return _UNSAFE.sub("_", task_name)


@dataclass(frozen=True)
class StoreLayout:
    logged_base: Path
    non_logged_base: Path

    @classmethod
    def of(cls, config: Settings) -> StoreLayout:
        job = config.job
        stores = Path(job.job_dir) / "stores"
        logged = _host_path(job.logged_store_base_dir, "job.logged.store.base.dir") or stores / "logged"
        non_logged = _host_path(job.non_logged_store_base_dir, "job.non-logged.store.base.dir") or stores / "non-logged"
        return cls(logged.expanduser().resolve(), non_logged.expanduser().resolve())

    def store_dir(self, store: str, task_name: str, logged: bool) -> Path:
        return (self.logged_base if logged else self.non_logged_base) / store / task_dir_name(task_name)


def _host_path(value: str | None, key: str) -> Path | None:
    """A base directory as this host knows it: environment variables expanded here, where the container runs,
    so each host of a cluster can keep its stores on a local disk of its own."""
    if not value:
        return None
    expanded = os.path.expandvars(value)
    if "$" in expanded:
        raise ConfigError(
            f"config key '{key}' is '{value}', but this host ({socket.gethostname()}) does not set the environment "
            "variable it names: set it on every host that runs containers (spark.executorEnv.<VAR> or the "
            "worker's environment), or give an absolute path"
        )
    return Path(expanded)


def attempt_dir(store_dir: Path, generation: int, epoch: int) -> Path:
    """The working directory of one attempt of a container for the store directory ``store_dir``."""
    return store_dir.with_name(f"{base_dir(store_dir).name}{ATTEMPT_SEPARATOR}{generation}.{epoch}")


def base_dir(store_dir: Path) -> Path:
    """``<base>/<store>/<task>`` of a store directory, whichever attempt's it is."""
    return store_dir.with_name(store_dir.name.split(ATTEMPT_SEPARATOR, 1)[0])


def _names_in(directory: Path) -> list[str]:
    """The entry names of ``directory`` (none when it does not exist)."""
    try:
        return os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []


class StoreDirListing(Protocol):
    """Where a task's scans of ``<base>/<store>`` get the names there that start with its own prefix.

    That directory holds about three entries per task of the container (working, owner and checkpoint
    directories), so how it is listed decides whether a container's start costs tasks or tasks²."""

    def starting_with(self, directory: Path, prefix: str) -> list[str]:
        """The names in ``directory`` that start with ``prefix``."""


class LiveListing:
    """Lists the directory at each call: for a task on its own (tools, tests of one store)."""

    def starting_with(self, directory: Path, prefix: str) -> list[str]:
        return [name for name in _names_in(directory) if name.startswith(prefix)]


LIVE = LiveListing()


class ListedOnce:
    """Lists each directory once, at its first look, and answers every later look from that sorted listing
    by binary search, so a container whose ``N`` tasks each scan ``<base>/<store>`` lists it once, not ``N``
    times (at 1,000 tasks the per-task listings of 3,000 names were most of a start's CPU beyond RocksDB's).

    Its answers are what the directory held when first looked at, which is what a start-up scan looks for:
    what earlier attempts left (their working directories, leftover checkpoints). Entries deleted since are
    skipped by every caller (deleting a missing path is a no-op; ``checkpoint_dirs`` keeps directories
    only). A snapshot that a task's zombie made after the listing but before the task's claim fenced it is
    missed here and deleted by the task's first commit cleanup, which looks in a second listing, taken once
    after every task of the container claimed its directories (``ContainerStorageManager.claimed_listing``).
    One per container (``ContainerStorageManager``); thread-safe."""

    def __init__(self) -> None:
        self._listings: dict[Path, list[str]] = {}
        self._lock = threading.Lock()

    def starting_with(self, directory: Path, prefix: str) -> list[str]:
        with self._lock:
            names = self._listings.get(directory)
            if names is None:
                names = self._listings[directory] = sorted(_names_in(directory))
        found = []
        for index in range(bisect.bisect_left(names, prefix), len(names)):
            if not names[index].startswith(prefix):
                break
            found.append(names[index])
        return found


def stale_attempt_dirs(store_dir: Path, listing: StoreDirListing = LIVE) -> list[Path]:
    """The working directories of the task's other attempts (and a pre-attempt ``<task>`` directory, and
    half-made restores of any attempt): what the owner of ``store_dir`` deletes."""
    base = base_dir(store_dir)
    owner, own = base.name + OWNER_SUFFIX, store_dir.name
    names = listing.starting_with(base.parent, base.name + ATTEMPT_SEPARATOR)
    if os.path.lexists(base):
        names.append(base.name)
    return sorted(base.parent / name for name in names if name not in (owner, own))


def checkpoint_dir(store_dir: Path, checkpoint_id: CheckpointId) -> Path:
    return store_dir.with_name(f"{base_dir(store_dir).name}-{checkpoint_id}")


def checkpoint_dirs(store_dir: Path, listing: StoreDirListing = LIVE) -> dict[CheckpointId, Path]:
    """The store's checkpoint directories by CheckpointId (leftovers that are not one are left out)."""
    found = {}
    prefix = base_dir(store_dir).name + "-"
    pattern = re.compile(re.escape(prefix) + r"(\d+-\d+)")
    for name in listing.starting_with(store_dir.parent, prefix):
        if match := pattern.fullmatch(name):
            entry = store_dir.parent / name
            if entry.is_dir():
                found[CheckpointId.parse(match.group(1))] = entry
    return dict(sorted(found.items()))


def delete_checkpoint_dirs(store_dir: Path, keep: CheckpointId | None = None, listing: StoreDirListing = LIVE) -> None:
    """Delete every ``<store dir>-*`` sibling but ``keep``'s, including half-made ones (``.tmp``)."""
    keep_name = None if keep is None else checkpoint_dir(store_dir, keep).name
    for name in listing.starting_with(store_dir.parent, base_dir(store_dir).name + "-"):
        if name != keep_name:
            delete_path(store_dir.parent / name)


def delete_checkpoint_dirs_among(
    store_dir: Path, checkpoint_ids: Iterable[CheckpointId], keep: CheckpointId | None = None
) -> None:
    """Delete the checkpoint directories of ``checkpoint_ids`` but ``keep``'s, with any half-made ``.tmp``
    sibling of theirs. Unlike ``delete_checkpoint_dirs`` it does not list ``<base>/<store>``, which holds
    every task's directories: a commit that lists it costs in proportion to the container's tasks, and a
    round of commits of all of them in proportion to their square."""
    for checkpoint_id in checkpoint_ids:
        if checkpoint_id != keep:
            directory = checkpoint_dir(store_dir, checkpoint_id)
            delete_path(directory)
            delete_path(directory.with_name(directory.name + ".tmp"))


def delete_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
        if path.exists():
            shutil.rmtree(path)  # raises, naming what could not be removed
    elif path.exists() or path.is_symlink():
        path.unlink()


def write_file_atomically(path: Path, data: bytes) -> None:
    """Write, fsync and rename into place: a reader sees the old file or the new one, whole."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    sync_dir(path.parent)


def copy_dir(source: Path, target: Path, link: Callable[[Path], bool] = lambda p: p.suffix == ".sst") -> None:
    """Copy a store directory: files ``link`` accepts (immutable SSTs) are hard-linked, the rest copied
    (RocksDB appends to its MANIFEST, which must not change the checkpoint it came from)."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        destination = target / entry.name
        if entry.is_dir():
            copy_dir(entry, destination, link)
        elif link(entry):
            try:
                os.link(entry, destination)
            except OSError:
                shutil.copy2(entry, destination)
        else:
            shutil.copy2(entry, destination)


def write_offset_file(directory: Path, offsets: Mapping[SystemStreamPartition, str | None]) -> None:
    document = {ssp.key(): offset for ssp, offset in sorted(offsets.items())}
    write_file_atomically(directory / OFFSET_V2_FILE, orjson.dumps(document))


def read_offset_file(directory: Path) -> dict[SystemStreamPartition, str | None] | None:
    """The changelog offsets an ``OFFSET-v2`` file records; None when absent or unreadable."""
    try:
        document = orjson.loads((directory / OFFSET_V2_FILE).read_bytes())
        return {SystemStreamPartition.parse_key(key): offset for key, offset in document.items()}
    except (OSError, orjson.JSONDecodeError, AttributeError, MillstreamError):
        return None


def write_checkpoint_file(directory: Path, checkpoint: CheckpointV2) -> None:
    write_file_atomically(directory / CHECKPOINT_V2_FILE, checkpoint.to_bytes())


def read_checkpoint_file(directory: Path) -> CheckpointV2 | None:
    """The V2 checkpoint a ``CHECKPOINT-V2`` file records; None when absent or unreadable."""
    try:
        return CheckpointV2.from_bytes((directory / CHECKPOINT_V2_FILE).read_bytes())
    except (OSError, CheckpointFormatError):
        return None
