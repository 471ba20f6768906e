"""A versioned adjunct store: serves sealed versions of a bounded dataset while the next one is built.

SEP-4's "Bounded dataset": records of the next version go into a *building* version; when the stream's
end-of-version marker arrives the store *seals* it, switches readers to it and drops the old one.
A version may also arrive bulk-built as table files that are ingested whole (``install``).

Guarantees:

- Readers never see a version before it is sealed, and never a mix of two: the serving version is
  one attribute, replaced by a single assignment, and every read of a ``view()`` fetches it once.
- A replaced version stays open for ``retire_after_s`` so reads under way finish on it; ``maintain``
  then closes it and deletes its directory.
- On disk (``directory``)::

      versions/<n>/   one engine directory per version, n increasing
      CURRENT         JSON naming the serving version, its label, the offsets of its end-of-version
                      markers and when it was sealed; written atomically, checksummed

  ``CURRENT`` is written before readers switch, so after a crash the store serves the last version
  it recorded and resumes reading its stream after that version's markers. Every other version
  directory (a partial building one, a retired one) is deleted at start. A missing or corrupt
  ``CURRENT`` means no version: readers see an empty store, never a partial one.

Thread model: one writer thread (``writer``, ``seal``, ``install``, ``discard_building``,
``maintain``, ``close``) and any number of reader threads using ``view()``.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from millstream.adjunct.view import ReadOnlyKeyValueStore
from millstream.errors import MillstreamError
from millstream.model import SystemStreamPartition
from millstream.serde.base import Serde
from millstream.storage.errors import StoreError
from millstream.storage.inmemory import InMemoryKeyValueStorageEngine
from millstream.storage.kv import Entry, KeyValueStorageEngine, KeyValueStore, TaskKeyValueStore
from millstream.storage.layout import delete_path, write_file_atomically

VERSIONS_DIR = "versions"
CURRENT_FILE = "CURRENT"

OpenEngine = Callable[[Path | None], KeyValueStorageEngine]
"""Opens a fresh engine in a version directory (None for a non-persistent store)."""


@dataclass(frozen=True, slots=True)
class _Version:
    """A version and what was recorded when it started serving; never changed once made."""

    store: TaskKeyValueStore
    path: Path | None = None
    label: str | None = None
    sealed_offsets: Mapping[SystemStreamPartition, str] = field(default_factory=dict)
    sealed_at_ms: int | None = None


class VersionedStore:
    """One versioned adjunct store instance: a task's (partitioned input) or a container's (broadcast)."""

    def __init__(
        self,
        directory: Path | None,
        store_name: str,
        owner: str,
        open_engine: OpenEngine,
        key_serde: Serde | None = None,
        msg_serde: Serde | None = None,
        *,
        source: str = "its input stream",
        retire_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = None if directory is None else Path(directory)
        self.store_name = store_name
        self.owner = owner
        self.source = source
        self._open_engine = open_engine
        self._key_serde = key_serde
        self._msg_serde = msg_serde
        self._retire_after_s = retire_after_s
        self._clock = clock
        self._building: _Version | None = None
        self._retiring: list[tuple[float, _Version]] = []
        self._next_number = 0
        self._closed = False
        self._serving = self._recover() if self.directory is not None else self._empty()

    def __repr__(self) -> str:
        return f"VersionedStore(store={self.store_name!r}, owner={self.owner!r}, serving={self.serving_label!r})"

    # --- what readers and the adjunct loop see ---------------------------------------------------

    def view(self) -> ReadOnlyKeyValueStore:
        """The task-facing store: reads the serving version of the moment (empty while there is none)."""
        return ReadOnlyKeyValueStore(self.serving_store, self.store_name, self.source)

    def serving_store(self) -> KeyValueStore:
        """The serving version's store as of this call, for a ``ReadOnlyKeyValueStore`` target (a view
        that must outlive this instance can use ``lambda: versioned.serving_store()``). Read it only."""
        return self._serving.store

    @property
    def serving_label(self) -> str | None:
        return self._serving.label

    @property
    def sealed_offsets(self) -> dict[SystemStreamPartition, str]:
        """Where the serving version's end-of-version markers are: where to resume reading the stream."""
        return dict(self._serving.sealed_offsets)

    @property
    def sealed_at_ms(self) -> int | None:
        """When the serving version was sealed or installed (epoch ms); None while there is none."""
        return self._serving.sealed_at_ms

    @property
    def building(self) -> bool:
        """Whether a version is being built (something asked for ``writer`` since the last seal)."""
        return self._building is not None

    @property
    def writer(self) -> TaskKeyValueStore:
        """The building version, made on first use; invisible to readers until ``seal``."""
        self._check_open()
        if self._building is None:
            self._building = self._new_version()
        return self._building.store

    # --- switching versions -----------------------------------------------------------------------

    def seal(self, label: str, offsets: Mapping[SystemStreamPartition, str]) -> None:
        """Make the building version (an empty one if nothing was written) the serving one.

        ``offsets`` are the positions of the end-of-version markers, recorded with the version.
        """
        self._check_open()
        if self._building is None:
            self._building = self._new_version()
        version = self._building
        try:
            version.store.flush()
        except Exception as error:
            raise self._error(f"cannot flush version '{label}'", error) from None
        self._switch(version, label, offsets)
        self._building = None

    def install(
        self,
        label: str,
        sst_files: Sequence[Path],
        offsets: Mapping[SystemStreamPartition, str] | None = None,
    ) -> None:
        """Serve a bulk-built version made of ``sst_files`` (copied in; the caller keeps them).

        ``offsets`` None keeps the serving version's offsets. A version being built stays in progress:
        its next ``seal`` replaces the installed one.
        """
        self._check_open()
        if self.directory is None:
            raise StoreError(
                f"{self._name()}: cannot install version '{label}' from table files: "
                "the store is not persistent (bulk-built versions need RocksDB)"
            )
        version = self._new_version()
        try:
            version.store.engine.ingest([Path(file) for file in sst_files])
        except BaseException:
            self._drop(version)
            raise
        self._switch(version, label, self._serving.sealed_offsets if offsets is None else offsets)

    def discard_building(self) -> None:
        """Forget the version being built (e.g. its stream was reset); the serving one is untouched."""
        if self._building is not None:
            version, self._building = self._building, None
            self._drop(version)

    def maintain(self) -> None:
        """Close and delete the retired versions whose grace period is over; cheap when none is due."""
        retiring = self._retiring
        if not retiring or retiring[0][0] > self._clock():
            return
        now = self._clock()
        while retiring and retiring[0][0] <= now:
            _, version = retiring.pop(0)
            self._drop(version)

    def close(self) -> None:
        """Close every version; their files stay (a restart serves the sealed one and deletes the rest).

        Reads through a view afterwards raise ``StoreError``.
        """
        if self._closed:
            return
        self._closed = True
        versions = [version for _, version in self._retiring]
        self._retiring = []
        if self._building is not None:
            versions.append(self._building)
            self._building = None
        versions.append(self._serving)
        for version in versions:
            _close(version, self._name())

    # --- internals --------------------------------------------------------------------------------

    def _switch(self, version: _Version, label: str, offsets: Mapping[SystemStreamPartition, str]) -> None:
        sealed = _Version(version.store, version.path, label, dict(offsets), int(time.time() * 1000))
        if self.directory is not None:
            try:
                self._write_current(sealed)
            except OSError as error:
                raise self._error(f"cannot record version '{label}' in {CURRENT_FILE}", error) from None
        previous, self._serving = self._serving, sealed
        self._retiring.append((self._clock() + self._retire_after_s, previous))

    def _new_version(self) -> _Version:
        path = None
        if self.directory is not None:
            path = self.directory / VERSIONS_DIR / str(self._next_number)
            self._next_number += 1
            delete_path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
        engine = self._open_engine(path)
        return _Version(self._task_store(engine), path)

    def _task_store(self, engine: KeyValueStorageEngine) -> TaskKeyValueStore:
        return TaskKeyValueStore(self.owner, self.store_name, engine, self._key_serde, self._msg_serde)

    def _empty(self) -> _Version:
        return _Version(self._task_store(InMemoryKeyValueStorageEngine()))

    def _drop(self, version: _Version) -> None:
        _close(version, self._name())
        if version.path is not None:
            delete_path(version.path)

    def _recover(self) -> _Version:
        """The version ``CURRENT`` names, after deleting every other version directory."""
        assert self.directory is not None
        versions = self.directory / VERSIONS_DIR
        found = {int(p.name): p for p in versions.iterdir() if p.name.isdigit()} if versions.is_dir() else {}
        self._next_number = max(found, default=-1) + 1
        recorded = self._read_current()
        serving = self._empty()
        if recorded is not None and recorded.get("version") in found and found[recorded["version"]].is_dir():
            path = found[recorded["version"]]
            serving = _Version(
                self._task_store(self._open_engine(path)),
                path,
                recorded["label"],
                recorded["sealed_offsets"],
                recorded["sealed_at_ms"],
            )
        if versions.is_dir():
            for entry in versions.iterdir():
                if entry != serving.path:
                    delete_path(entry)
        return serving

    def _write_current(self, version: _Version) -> None:
        assert self.directory is not None and version.path is not None
        body = {
            "version": int(version.path.name),
            "label": version.label,
            "sealed_offsets": {ssp.key(): offset for ssp, offset in sorted(version.sealed_offsets.items())},
            "sealed_at_ms": version.sealed_at_ms,
        }
        document = {"crc32": zlib.crc32(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)), **body}
        write_file_atomically(self.directory / CURRENT_FILE, orjson.dumps(document))

    def _read_current(self) -> dict[str, Any] | None:
        """``CURRENT``'s fields, None when it is absent, torn or fails its checksum."""
        assert self.directory is not None
        try:
            document = orjson.loads((self.directory / CURRENT_FILE).read_bytes())
            crc = document.pop("crc32")
            if zlib.crc32(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)) != crc:
                return None
            offsets = {SystemStreamPartition.parse_key(key): str(o) for key, o in document["sealed_offsets"].items()}
            version, label, sealed_at_ms = document["version"], document["label"], document["sealed_at_ms"]
            if not isinstance(version, int) or not isinstance(label, str) or not isinstance(sealed_at_ms, int):
                return None
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, AttributeError, MillstreamError):
            return None
        return {"version": version, "label": label, "sealed_offsets": offsets, "sealed_at_ms": sealed_at_ms}

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self._name()} is closed")

    def _name(self) -> str:
        return f"{self.owner} adjunct store '{self.store_name}'"

    def _error(self, action: str, error: Exception) -> StoreError:
        return StoreError(f"{self._name()}: {action}: {error}")


def _close(version: _Version, name: str) -> None:
    """Close a version's engine; reads still reaching its store afterwards raise ``StoreError``."""
    engine = version.store.engine
    which = "the version being built" if version.label is None else f"version '{version.label}'"
    version.store.engine = _ClosedEngine(f"{name}: {which} was closed")
    engine.close()


class _ClosedEngine(KeyValueStorageEngine):
    """Stands in for a closed engine so late reads fail clearly (and a view retries them)."""

    def __init__(self, message: str) -> None:
        self._message = message

    def _fail(self) -> StoreError:
        return StoreError(self._message)

    def get(self, key: bytes) -> bytes | None:
        raise self._fail()

    def get_all(self, keys: Sequence[bytes]) -> list[bytes | None]:
        raise self._fail()

    def put(self, key: bytes, value: bytes) -> None:
        raise self._fail()

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None]]) -> None:
        raise self._fail()

    def delete(self, key: bytes) -> None:
        raise self._fail()

    def range(self, start: bytes | None, end: bytes | None) -> Iterator[Entry]:
        raise self._fail()

    def snapshot(self, start: bytes | None, end: bytes | None) -> Iterable[Entry]:
        raise self._fail()

    def flush(self) -> None:
        raise self._fail()

    def ingest(self, files: Sequence[Path]) -> None:
        raise self._fail()

    def close(self) -> None:
        pass
