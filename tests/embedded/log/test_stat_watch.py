"""A closed partition's signature (``stat_watch``): every commit changes it, and one taken too soon after a write
is not trusted."""

from __future__ import annotations

import os
import time
from pathlib import Path

from millstream.embedded.log import stat_watch
from millstream.embedded.log.storage import LogPartition


def partition(tmp_path: Path) -> LogPartition:
    return LogPartition(tmp_path / "p0.db", "s", 0, create=True)


def test_every_append_changes_the_signature_whether_the_file_stays_open_or_not(tmp_path: Path) -> None:
    log = partition(tmp_path)
    path = str(log.path)
    try:
        seen = {stat_watch.signature(path)}
        for n in range(20):  # appends in quick succession, in the same clock tick as the signature before them
            log.append_columns([0], None, [b"%d" % n], None)
            now = stat_watch.signature(path)
            assert now not in seen, f"append {n} left the signature as it was"
            seen.add(now)
    finally:
        log.close()
    closed = stat_watch.signature(path)  # closing the last connection checkpoints the file and removes its WAL
    reopened = LogPartition(log.path, "s", 0)
    try:
        reopened.append_columns([0], None, [b"again"], None)
    finally:
        reopened.close()
    assert stat_watch.signature(path) != closed


def test_a_signature_is_trusted_only_when_its_files_were_last_written_well_before_the_watch_began(
    tmp_path: Path,
) -> None:
    log = partition(tmp_path)
    log.close()
    path = str(log.path)
    assert stat_watch.trusted(path, time.time_ns()) is None, "trusted right after a write"
    old = time.time_ns() - 10 * stat_watch.RACY_NS
    for name in (path, path + "-wal"):
        if os.path.exists(name):
            os.utime(name, ns=(old, old))
    assert stat_watch.trusted(path, time.time_ns()) == stat_watch.signature(path)


def test_a_missing_file_has_no_signature(tmp_path: Path) -> None:
    assert stat_watch.signature(str(tmp_path / "p9.db")) is None
    assert stat_watch.trusted(str(tmp_path / "p9.db"), time.time_ns()) is None
