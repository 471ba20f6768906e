"""``benchmarks.log_create`` times a real stream's creation beside as many plain files, and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

from benchmarks.log_create import measure


def test_a_measurement_times_the_stream_and_the_plain_files_and_removes_both(tmp_path: Path) -> None:
    stream_cpu, stream_wall, plain_cpu, plain_wall = measure(tmp_path, 5, fsync=False)
    assert min(stream_cpu, stream_wall, plain_cpu, plain_wall) > 0
    assert list(tmp_path.iterdir()) == [], "the stream and the plain files were deleted"
