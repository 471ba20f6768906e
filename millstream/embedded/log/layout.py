"""The log's directory tree: ``<root>/<stream>/stream.json``, ``<root>/<stream>/p<N>.db`` and the segment
files ``p<N>-<first offset>.seg`` each partition writes beside its file.

A stream exists once its directory holds ``stream.json``. Creation builds the whole directory
(``stream.json`` and every partition file) under a private staging name and renames it into place;
a rename onto an existing stream directory fails, so when several processes create the same stream
at once exactly one wins and the others see it already exists. Deletion renames the directory away
before removing it, so no process ever sees half a stream.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from millstream.contracts.systems import StreamOwnedError, StreamOwner
from millstream.embedded.log.errors import CorruptStreamError, InvalidStreamNameError, LogSystemError
from millstream.embedded.log.storage import create_partition_files
from millstream.errors import StreamNotFoundError
from millstream.files import sync_dir

STREAM_FILE = "stream.json"
OWNER_FILE = "owner.json"
"""The stream's owner (``SystemAdmin.claim_stream``): ``{"job": ..., "store": ...}``, beside its data, so
deleting the stream releases it."""
FORMAT_VERSION = 1
_STAGING_PREFIX = ".staging-"
_DELETING_PREFIX = ".deleting-"


@dataclass(frozen=True)
class StreamInfo:
    """The content of ``stream.json``."""

    name: str
    partition_count: int
    created_at_ms: int
    config: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": FORMAT_VERSION,
                "stream": self.name,
                "partitions": self.partition_count,
                "created_at_ms": self.created_at_ms,
                "config": dict(self.config),
            },
            indent=2,
            sort_keys=True,
        )


class LogLayout:
    """Paths and lifecycle of the streams under one root directory; safe across processes."""

    def __init__(self, root: Path, system: str = "log") -> None:
        self.root = root
        self.system = system

    def __repr__(self) -> str:
        return f"LogLayout({str(self.root)!r})"

    def stream_dir(self, stream: str) -> Path:
        check_stream_name(stream)
        return self.root / stream

    def partition_path(self, stream: str, partition: int) -> Path:
        return self.stream_dir(stream) / f"p{partition}.db"

    def exists(self, stream: str) -> bool:
        return (self.stream_dir(stream) / STREAM_FILE).is_file()

    def read_info(self, stream: str) -> StreamInfo | None:
        """The stream's ``stream.json``, or None when the stream does not exist."""
        path = self.stream_dir(stream) / STREAM_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as error:
            raise CorruptStreamError(stream, path, f"cannot read {STREAM_FILE}: {error}") from None
        try:
            data = json.loads(text)
            info = StreamInfo(
                name=stream,
                partition_count=int(data["partitions"]),
                created_at_ms=int(data["created_at_ms"]),
                config={str(k): str(v) for k, v in data.get("config", {}).items()},
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise CorruptStreamError(stream, path, f"{STREAM_FILE} is not valid ({error!r})") from None
        if info.partition_count < 1:
            raise CorruptStreamError(stream, path, f"{STREAM_FILE} declares {info.partition_count} partitions")
        return info

    def require_info(self, stream: str) -> StreamInfo:
        info = self.read_info(stream)
        if info is None:
            raise StreamNotFoundError(self.system, stream, f"no '{self.stream_dir(stream) / STREAM_FILE}'")
        return info

    def create(self, stream: str, partition_count: int, config: Mapping[str, str], *, fsync: bool = False) -> bool:
        """Create the stream with empty partitions; False (and no change) when it already exists."""
        target = self.stream_dir(stream)
        if partition_count < 1:
            raise LogSystemError(f"log stream '{stream}' needs at least one partition, not {partition_count}")
        if (target / STREAM_FILE).is_file():
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f"{_STAGING_PREFIX}{stream}-{uuid.uuid4().hex}"
        staging.mkdir()
        try:
            paths = [staging / f"p{partition}.db" for partition in range(partition_count)]
            create_partition_files(paths, stream, fsync=fsync)
            info = StreamInfo(stream, partition_count, int(time.time() * 1000), dict(config))
            _write_synced(staging / STREAM_FILE, info.to_json())
            try:
                os.rename(staging, target)
            except OSError as error:
                if (target / STREAM_FILE).is_file():
                    return False
                raise CorruptStreamError(stream, target, f"cannot create the stream directory: {error}") from None
            sync_dir(self.root)
            return True
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    def claim(self, stream: str, owner: StreamOwner, takeover_key: str, *, takeover: bool) -> StreamOwner | None:
        """``SystemAdmin.claim_stream`` on the log: read and write ``owner.json`` under an exclusive ``flock``
        of it, so concurrent claims (any process on the host) are serialised; the file is written in place
        and synced, and an unreadable one (a crash while writing) counts as unowned."""
        path = self.stream_dir(stream) / OWNER_FILE
        self.require_info(stream)
        with open(path, "a+b") as file:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX)
            file.seek(0)
            try:
                previous = StreamOwner.from_json(json.loads(file.read() or b"null"))
            except ValueError:
                previous = None
            if previous == owner:
                return previous
            if previous is not None and not takeover:
                raise StreamOwnedError(self.system, stream, previous, owner, takeover_key)
            file.seek(0)
            file.truncate()
            file.write(json.dumps(owner.to_json(), sort_keys=True).encode("utf-8"))
            file.flush()
            os.fsync(file.fileno())
        sync_dir(path.parent)
        return previous

    def delete(self, stream: str) -> bool:
        """Remove the stream and its data; False when it did not exist."""
        target = self.stream_dir(stream)
        doomed = self.root / f"{_DELETING_PREFIX}{stream}-{uuid.uuid4().hex}"
        try:
            os.rename(target, doomed)
        except FileNotFoundError:
            return False
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def list_streams(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            entry.name
            for entry in self.root.iterdir()
            if not entry.name.startswith(".") and (entry / STREAM_FILE).is_file()
        )


def check_stream_name(stream: str) -> None:
    """Stream names become directory names: no separators, no leading dot (reserved), not empty."""
    if not stream:
        raise InvalidStreamNameError(stream, "it is empty")
    if stream.startswith("."):
        raise InvalidStreamNameError(stream, "it starts with '.'")
    if any(char in stream for char in "/\\\0"):
        raise InvalidStreamNameError(stream, "it contains '/', '\\' or a NUL character")
    if len(stream.encode("utf-8")) > 200:
        raise InvalidStreamNameError(stream, "it is longer than 200 bytes")


def _write_synced(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
