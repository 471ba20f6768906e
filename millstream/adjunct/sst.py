"""RocksDB table files written outside a database, to be ingested whole into one (a bulk-built version).

Ingesting a file is a metadata operation: the database adopts the file instead of replaying its
entries, which is what makes a bulk-built version cheap to install in every task or container.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import rocksdict

from millstream.storage.errors import StoreError


def write_sst(path: Path, entries: Iterable[tuple[bytes, bytes]]) -> int:
    """Write ``entries`` (strictly ascending by key bytes) to a table file at ``path``; returns how many.

    An empty ``entries`` writes no file (RocksDB cannot write an empty table file) and returns 0.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer: rocksdict.SstFileWriter | None = None
    count = 0
    previous: bytes | None = None
    try:
        for key, value in entries:
            if previous is not None and key <= previous:
                raise StoreError(
                    f"table file '{path}': keys must be written in ascending order ({key!r} after {previous!r})"
                )
            if writer is None:
                writer = rocksdict.SstFileWriter(options=rocksdict.Options(raw_mode=True))
                writer.open(str(path))
            writer[key] = value
            previous = key
            count += 1
        if writer is not None:
            writer.finish()
    except StoreError:
        raise
    except Exception as error:  # rocksdict raises plain exceptions with RocksDB's status text
        raise StoreError(f"cannot write table file '{path}': {error}") from None
    return count
