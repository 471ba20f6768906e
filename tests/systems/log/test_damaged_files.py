"""A damaged partition file of the embedded log (cut short by a full disk or a bad copy, or with pages
overwritten) is never read as a shorter log: opening or reading it fails naming the stream, the
partition, the file and, once records are being read, the offset; a job over it fails with that.

SQLite's own recovery covers a crash mid-append (the write-ahead log's last frames are dropped, which is
the append that never committed); damage below that level cannot be repaired safely, so the log refuses it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from millstream.systems.log.config import LogSystemConfig
from millstream.systems.log.errors import LogStorageError
from millstream.systems.log.layout import LogLayout
from millstream.systems.log.storage import LogPartition
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, seal


def full_partition(path: Path) -> None:
    """A partition file of about 2.5 MB: 200 batches of 100 records, checkpointed into the main file."""
    log = LogPartition(path, "events", 0, create=True)
    for batch in range(200):
        log.append([(1_000, b"k", batch.to_bytes(4, "big") * 25, None) for _ in range(100)])
    log.close()


@pytest.mark.parametrize("kept", [0.5, 0.99])
def test_a_truncated_partition_file_fails_to_open_naming_stream_partition_and_file(tmp_path: Path, kept: float) -> None:
    path = tmp_path / "p0.db"
    full_partition(path)
    os.truncate(path, int(path.stat().st_size * kept))
    with pytest.raises(LogStorageError, match=rf"log stream 'events' partition 0 \(file '{path}'\): not a usable"):
        LogPartition(path, "events", 0)


def test_overwritten_pages_fail_the_read_naming_the_offset_instead_of_returning_fewer_records(tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    full_partition(path)
    with path.open("r+b") as file:
        file.seek(path.stat().st_size // 2)
        file.write(bytes(8192))
    log = LogPartition(path, "events", 0)
    offset = 0
    with pytest.raises(LogStorageError, match=r"partition 0 \(file .*\): cannot read from offset \d+: .*malformed"):
        while (records := log.read(offset, 1000)) is not None and records.rows():
            offset += len(records.rows())
    assert 0 < offset < 20_000  # what came before the damage was read; nothing after it was skipped
    log.close()


def test_a_job_over_a_truncated_input_partition_fails_before_it_starts_naming_stream_partition_and_file(
    tmp_path: Path,
) -> None:
    config = job_config(tmp_path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 20_000)
    seal(config, "in")
    damaged = LogLayout(LogSystemConfig.for_system(config, "log").root(config), "log").partition_path("in", 1)
    os.truncate(damaged, damaged.stat().st_size // 2)
    with pytest.raises(LogStorageError) as failed:  # when planning reads the partitions' offsets
        InProcessRunner(config).run(timeout=60)
    assert f"log stream 'in' partition 1 (file '{damaged}'): not a usable log partition file" in str(failed.value)
