"""A damaged partition of the embedded log (its index file or a segment file cut short by a full disk or a
bad copy, bytes overwritten, a segment lost) is never read as a shorter log: opening or reading it fails
naming the stream, the partition, the file and, once records are being read, the offset; a job over it
fails with that.

SQLite's own recovery covers a crash mid-append in the index (the write-ahead log's last frames are dropped,
which is the append that never committed), and a segment's bytes past its committed end are overwritten
by the next append; damage below that level cannot be repaired safely, so the log refuses it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from millstream.embedded.log.config import LogSystemConfig
from millstream.embedded.log.errors import LogStorageError
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.storage import PAGE_SIZE, LogPartition
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, job_config, output_origins, seal


def full_partition(path: Path) -> Path:
    """A partition of 200 batches of 100 records, about 2 MB in one segment file, which it returns."""
    log = LogPartition(path, "events", 0, create=True)
    for batch in range(200):
        log.append([(1_000, b"k", batch.to_bytes(4, "big") * 25, None) for _ in range(100)])
    log.close()
    (segment,) = path.parent.glob("p0-*.seg")
    return segment


def read_until_it_fails(log: LogPartition) -> int:
    """Read the partition from its start, 100 records at a time, until a read raises; how many came first."""
    offset = 0
    try:
        while (records := log.read(offset, 100)) is not None and records.values:
            offset += len(records.values)
    except LogStorageError as error:
        error.add_note(f"after {offset} records")
        raise
    return offset


@pytest.mark.parametrize("kept", ["half", "all but the last page"])
def test_a_truncated_index_file_fails_to_open_naming_stream_partition_and_file(tmp_path: Path, kept: str) -> None:
    path = tmp_path / "p0.db"
    full_partition(path)
    size = path.stat().st_size
    os.truncate(path, size // 2 if kept == "half" else size - PAGE_SIZE)
    with pytest.raises(LogStorageError, match=rf"log stream 'events' partition 0 \(file '{path}'\): not a usable"):
        LogPartition(path, "events", 0)


def test_overwritten_bytes_in_a_segment_fail_the_read_naming_offset_and_segment_file(tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    segment = full_partition(path)
    with segment.open("r+b") as file:
        file.seek(segment.stat().st_size // 2)
        file.write(bytes(100))
    log = LogPartition(path, "events", 0)
    with pytest.raises(
        LogStorageError, match=rf"cannot read from offset \d+: .* of segment file '{segment}' fail"
    ) as failed:
        read_until_it_fails(log)
    assert failed.value.__notes__ == ["after 10000 records"]  # the batches before the damage, and nothing after
    log.close()


def test_a_truncated_segment_fails_the_read_at_the_first_record_it_lost(tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    segment = full_partition(path)
    os.truncate(segment, segment.stat().st_size // 2 + 1000)  # within the 101st batch
    log = LogPartition(path, "events", 0)
    with pytest.raises(
        LogStorageError, match=rf"cannot read from offset \d+: segment file '{segment}' holds \d+ of"
    ) as failed:
        read_until_it_fails(log)
    assert failed.value.__notes__ == ["after 10000 records"]  # the batches wholly before the cut, and nothing after
    log.close()


def test_a_missing_segment_fails_the_read_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    segment = full_partition(path)
    segment.unlink()
    log = LogPartition(path, "events", 0)
    with pytest.raises(LogStorageError, match=rf"cannot read from offset 0: segment file '{segment}' is missing"):
        log.read(0, 10)
    log.close()


def test_a_job_over_a_truncated_input_partition_fails_before_it_starts_naming_stream_partition_and_file(
    tmp_path: Path,
) -> None:
    config = job_config(tmp_path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 20_000)
    seal(config, "in")
    damaged = LogLayout(config.view(LogSystemConfig, "log").root(config), "log").partition_path("in", 1)
    os.truncate(damaged, damaged.stat().st_size // 2)
    result = InProcessRunner(config).run(timeout=60)  # the container reads its partitions' offsets at start
    assert result.outcome == "failed"
    assert f"log stream 'in' partition 1 (file '{damaged}'): not a usable log partition file" in str(result.error)
    assert output_origins(config) == []  # nothing of the healthy partition 0 was processed either
