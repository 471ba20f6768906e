"""``benchmarks.log_opens`` times real opens and closes of partition files and leaves none of them open."""

from __future__ import annotations

import os

from benchmarks.log_opens import measure


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_a_measurement_times_each_open_and_close_and_closes_every_file_it_opened(tmp_path):
    before = _open_descriptors()
    fresh, shared, last, beside = measure(tmp_path, partitions=3, held=2)
    assert min(fresh, shared, last, beside) > 0
    assert _open_descriptors() == before, "every partition file opened, held or measured, was closed again"
