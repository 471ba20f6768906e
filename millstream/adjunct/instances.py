"""One adjunct store instance — a task's (partitioned input) or a container's (broadcast input) — and
how the adjunct loop writes it.

A plain store keeps the latest value of every key, written as the stream delivers them. A versioned
store (``stores.<s>.adstore.versioned``) writes into a building version and switches its readers when
every partition it reads has delivered the version's end-of-version marker; a partition that delivered
its marker waits (is *held*) until the others have, so no message of the next version is mixed in.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millstream.adjunct.recovery import Position, RecordedOffsets, read_recorded_offsets, write_recorded_offsets
from millstream.adjunct.versions import OpenEngine, VersionedStore
from millstream.adjunct.view import ReadOnlyKeyValueStore
from millstream.model import SystemStream, SystemStreamPartition
from millstream.serde.base import Serde
from millstream.storage.kv import KeyValueStorageEngine, KeyValueStore, TaskKeyValueStore
from millstream.storage.layout import delete_path

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdjunctStoreSpec:
    """What a store instance is: which store, whose, fed by which partitions, kept where and how."""

    name: str
    owner: str
    """The task (partitioned input) or ``container-<id>`` (broadcast input)."""
    stream: SystemStream
    ssps: frozenset[SystemStreamPartition]
    directory: Path | None
    """None for an in-memory store."""
    open_engine: OpenEngine
    key_serde: Serde | None
    msg_serde: Serde | None


class AdjunctStore(ABC):
    """Common to both kinds: identity, positions per partition, what is recorded at commit."""

    def __init__(self, spec: AdjunctStoreSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.owner = spec.owner
        self.stream = spec.stream
        self.ssps = spec.ssps
        self.directory = spec.directory
        self.found_on_disk = self.directory is not None and self.directory.is_dir() and any(self.directory.iterdir())
        """Whether a previous incarnation left anything in ``directory`` (checked before opening it)."""
        self.positions: dict[SystemStreamPartition, Position] = {}
        """Where reading of each partition stands (set at start, advanced by every stored message)."""
        self.started: dict[SystemStreamPartition, Position] = {}
        """Where this incarnation started reading."""
        self._open()
        self._view = ReadOnlyKeyValueStore(self._serving, spec.name, f"stream {spec.stream}")

    @abstractmethod
    def _open(self) -> None:
        """Open what ``directory`` holds (nothing: an empty store)."""

    @abstractmethod
    def _serving(self) -> KeyValueStore:
        """What readers see now."""

    def view(self) -> KeyValueStore:
        """The read-only view tasks get: it follows the store through re-creation and version switches."""
        return self._view

    def recreate(self) -> None:
        """Start over empty: delete what the store holds on disk."""
        self.close()
        if self.directory is not None:
            delete_path(self.directory)
        self._open()

    @property
    def key(self) -> str:
        """Its name in the metadata store's ``adstore-offsets`` namespace."""
        return f"{self.name}/{self.owner}"

    @property
    def serving_version(self) -> str | None:
        """The version readers see (versioned stores)."""
        return None

    @property
    def persistent(self) -> bool:
        return self.directory is not None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, owner={self.owner!r})"

    def recorded(self) -> RecordedOffsets | None:
        """What the store recorded beside its data at its last commit (persistent stores only)."""
        return read_recorded_offsets(self.directory) if self.directory is not None else None

    def resume_positions(self) -> dict[SystemStreamPartition, Position]:
        """Where a restart of this store, as it is on disk now, must resume."""
        return dict(self.positions)

    # --- written by the adjunct loop ---
    @abstractmethod
    def write(self, entries: Sequence[tuple[Any, Any]]) -> None:
        """Decoded entries; a None value deletes the key."""

    @abstractmethod
    def write_raw(self, entries: Sequence[tuple[bytes, bytes | None]]) -> None:
        """Entries already in the store's serialized form."""

    def end_of_version(self, ssp: SystemStreamPartition, label: str, offset: str) -> bool:
        """A marker arrived; True when ``ssp`` must wait for the other partitions' markers."""
        return False

    def held(self) -> frozenset[SystemStreamPartition]:
        return frozenset()

    def commit(self) -> dict[SystemStreamPartition, Position]:
        """Make what was written durable, then record beside it where a restart resumes; returns that."""
        self.flush()
        positions = self.resume_positions()
        if self.directory is not None:
            write_recorded_offsets(self.directory, positions)
        return positions

    @abstractmethod
    def flush(self) -> None: ...

    def maintain(self) -> None:  # noqa: B027 - only versioned stores have housekeeping
        """Periodic housekeeping on the adjunct loop's thread."""

    @abstractmethod
    def close(self) -> None: ...


class PlainAdjunctStore(AdjunctStore):
    """The latest value of every key of its input."""

    store: TaskKeyValueStore

    def _open(self) -> None:
        spec = self.spec
        engine = spec.open_engine(None if spec.directory is None else spec.directory / "db")
        self.store = TaskKeyValueStore(spec.owner, spec.name, engine, spec.key_serde, spec.msg_serde)

    def _serving(self) -> KeyValueStore:
        return self.store

    def write(self, entries: Sequence[tuple[Any, Any]]) -> None:
        self.store.put_all(entries)

    def write_raw(self, entries: Sequence[tuple[bytes, bytes | None]]) -> None:
        self.store.engine.put_all(entries)

    def flush(self) -> None:
        self.store.flush()

    def close(self) -> None:
        self.store.engine.close()


class VersionedAdjunctStore(AdjunctStore):
    """Sealed versions of a bounded dataset; readers see the last sealed (or bulk-installed) one."""

    versions: VersionedStore

    def __init__(self, spec: AdjunctStoreSpec, retire_after_s: float) -> None:
        self._retire_after_s = retire_after_s
        self._markers: dict[SystemStreamPartition, tuple[str, str]] = {}
        """Partitions whose end-of-version marker arrived: label and offset."""
        super().__init__(spec)

    def _open(self) -> None:
        spec = self.spec
        self.versions = VersionedStore(
            spec.directory,
            spec.name,
            spec.owner,
            spec.open_engine,
            spec.key_serde,
            spec.msg_serde,
            source=f"stream {spec.stream}",
            retire_after_s=self._retire_after_s,
        )

    def _serving(self) -> KeyValueStore:
        return self.versions.serving_store()

    def recorded(self) -> RecordedOffsets | None:
        """A versioned store resumes after its last sealed version's markers (a partial version is
        discarded at open); it is as old as its last commit or seal, whichever is later."""
        sealed = self.versions.sealed_offsets
        if self.directory is None or self.versions.serving_label is None:
            return None
        file = read_recorded_offsets(self.directory)
        committed = max(file.committed_ms if file else 0, self.versions.sealed_at_ms or 0)
        return RecordedOffsets({ssp: ("last", offset) for ssp, offset in sealed.items()}, committed)

    def resume_positions(self) -> dict[SystemStreamPartition, Position]:
        sealed = self.versions.sealed_offsets
        return {ssp: ("last", sealed[ssp]) if ssp in sealed else self.started[ssp] for ssp in self.ssps}

    def write(self, entries: Sequence[tuple[Any, Any]]) -> None:
        self.versions.writer.put_all(entries)

    def write_raw(self, entries: Sequence[tuple[bytes, bytes | None]]) -> None:
        self.versions.writer.engine.put_all(entries)

    def end_of_version(self, ssp: SystemStreamPartition, label: str, offset: str) -> bool:
        self._markers[ssp] = (label, offset)
        if set(self._markers) < self.ssps:
            return True
        labels = sorted({label for label, _ in self._markers.values()})
        if len(labels) > 1:
            log.warning(
                "%s: partitions ended the version with different labels %s; sealing it as %s", self, labels, label
            )
        offsets = {marker_ssp: marker_offset for marker_ssp, (_, marker_offset) in self._markers.items()}
        self.versions.seal(label, offsets)
        self._markers.clear()
        log.info("%s: version %s sealed and serving", self, label)
        return False

    def held(self) -> frozenset[SystemStreamPartition]:
        return frozenset(self._markers)

    @property
    def serving_version(self) -> str | None:
        return self.versions.serving_label

    def install(self, label: str, files: Sequence[Path]) -> None:
        self.versions.install(label, files)
        log.info("%s: bulk-built version %s installed and serving", self, label)

    def flush(self) -> None:
        if self.versions.building:
            self.versions.writer.flush()

    def maintain(self) -> None:
        self.versions.maintain()

    def close(self) -> None:
        self.versions.close()


def open_engine_for(factory: Any, store: str, own: Any, tasks_in_container: int) -> OpenEngine:
    def open_engine(path: Path | None) -> KeyValueStorageEngine:
        engine: KeyValueStorageEngine = factory.get_storage_engine(store, path, own, tasks_in_container)
        return engine

    return open_engine
