"""A process that takes the SQLite metadata store's write lock and stops itself holding it (the store's testing
stop point), as a paused container would: ``python -m tests.embedded.lock_holder <file> <marker dir> <writer>``.
Resumed, it finishes its write and exits 0."""

from __future__ import annotations

import sys

from millstream.embedded.sqlite import SqliteLockSettings, SqliteMetadataStore

NAMESPACE = "held"


def main(path: str, marker_dir: str, writer: str) -> None:
    settings = SqliteLockSettings(testing_stop_in_write=NAMESPACE, testing_marker_dir=marker_dir)
    with SqliteMetadataStore(path, settings) as store:
        store.set_writer(writer)
        store.put(NAMESPACE, "by-holder", b"written after the stop")


if __name__ == "__main__":
    main(*sys.argv[1:4])
