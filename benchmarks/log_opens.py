"""What opening an embedded-log partition file costs, against how many partition files the process holds open.

    python -m benchmarks.log_opens [--partitions 1000] [--held 0,1000,3000] [--runs 3] [--root DIR]

For each count of ``--held`` files kept open by the process, opens ``--partitions`` other partition files one
after another (``LogPartition``, without a page cache, as the consumer and the admin open them) twice: *fresh*,
when no connection of the process holds the file, and *shared*, while another connection of the process holds
it; then closes each, as the last connection to its file and beside another one. Each figure is CPU
microseconds per file (``time.process_time``), the median of ``--runs``, with its ratio to the first count of
``--held``.

Why it is worth knowing: SQLite's unix VFS looks each file it opens up in a list of every database file the
process holds open, so a fresh open costs more the more files are open; a file another connection of the same
process holds is found near the list's head and shares that connection's locks and shared-memory index. A
container holds about two partition files per task (its input and its changelog) while it opens them at
start-up, one open of a file it does not yet hold each, which is the part of its start-up that grows faster than
its tasks (issue 40).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.storage import LogPartition

T = TypeVar("T")


def _opened(layout: LogLayout, stream: str, count: int) -> list[LogPartition]:
    return [LogPartition(layout.partition_path(stream, p), stream, p, page_cache=False) for p in range(count)]


def _cpu_us_per(count: int, work: Callable[[], T]) -> tuple[float, T]:
    start = time.process_time()
    result = work()
    return (time.process_time() - start) / count * 1e6, result


def _close_all(logs: list[LogPartition]) -> None:
    for log in logs:
        log.close()


def measure(root: Path, partitions: int, held: int) -> tuple[float, float, float, float]:
    """CPU µs per file of a fresh open, a shared open, a last close and a shared close, ``held`` files open."""
    layout = LogLayout(root)
    layout.create("opened", partitions, {})
    layout.create("held", max(held, 1), {})
    holding = _opened(layout, "held", held)
    try:
        fresh, logs = _cpu_us_per(partitions, lambda: _opened(layout, "opened", partitions))
        last, _ = _cpu_us_per(partitions, lambda: _close_all(logs))
        holders = _opened(layout, "opened", partitions)
        shared, logs = _cpu_us_per(partitions, lambda: _opened(layout, "opened", partitions))
        beside, _ = _cpu_us_per(partitions, lambda: _close_all(logs))
        _close_all(holders)
    finally:
        _close_all(holding)
    return fresh, shared, last, beside


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1000, help="partition files opened per measurement")
    parser.add_argument("--held", default="0,1000,3000", help="counts of other partition files held open")
    parser.add_argument("--runs", type=int, default=3, help="measurements per count (the median is shown)")
    parser.add_argument("--root", type=Path, help="where the partition files go (default: a temporary directory)")
    args = parser.parse_args()
    counts = [int(count) for count in args.held.split(",")]
    print(f"CPU µs per partition file, {args.partitions} files, median of {args.runs}")
    columns = ("held", "fresh open", "x", "shared open", "x", "last close", "shared close")
    widths = [max(len(name), 6) for name in columns]
    print(" ".join(f"{name:>{width}}" for name, width in zip(columns, widths, strict=True)))
    base: tuple[float, float] | None = None
    for held in counts:
        runs = []
        for _ in range(args.runs):
            root = Path(tempfile.mkdtemp(prefix="log-opens-", dir=args.root))
            try:
                runs.append(measure(root, args.partitions, held))
            finally:
                shutil.rmtree(root, ignore_errors=True)
        fresh, shared, last, beside = (statistics.median(column) for column in zip(*runs, strict=True))
        base = base or (fresh, shared)
        ratios = (f"{fresh / base[0]:.2f}", f"{shared / base[1]:.2f}")
        cells = (f"{held}", f"{fresh:.0f}", ratios[0], f"{shared:.0f}", ratios[1], f"{last:.0f}", f"{beside:.0f}")
        print(" ".join(f"{cell:>{width}}" for cell, width in zip(cells, widths, strict=True)))


if __name__ == "__main__":
    main()
