"""What creating an embedded-log stream costs per partition, against the filesystem's cost of a new file.

    python -m benchmarks.log_create [--partitions 1000,10000] [--runs 3] [--root DIR] [--fsync]

For each count of ``--partitions``, creates a stream of that many partitions (``LogLayout.create``, as
``SystemAdmin.create_stream`` and ``millstream streams create`` do) in a fresh directory under ``--root``, and,
beside it, writes as many new files of a partition file's size into another fresh directory: the least any
creation of that many files can cost on that filesystem. Each figure is the median of ``--runs``, CPU
(``time.process_time``) and wall microseconds per partition, with the stream's ratio to the plain files.

Why it is worth knowing: a job creates its changelog and intermediate streams as wide as its tasks, so a
container of thousands of tasks waits for thousands of partition files at its first start.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from millstream.embedded.log.layout import LogLayout


def _timed(work: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    work()
    return time.process_time() - cpu, time.perf_counter() - wall


def _plain_files(directory: Path, count: int, size: int) -> None:
    payload = bytes(size)
    for index in range(count):
        with open(directory / f"p{index}.db", "xb") as file:
            file.write(payload)


def measure(root: Path, partitions: int, *, fsync: bool) -> tuple[float, float, float, float]:
    """CPU and wall seconds of creating a ``partitions``-wide stream, then of writing as many plain files."""
    work = Path(tempfile.mkdtemp(prefix="log-create-", dir=root))
    try:
        layout = LogLayout(work / "log")
        stream_cpu, stream_wall = _timed(lambda: layout.create("created", partitions, {}, fsync=fsync))
        size = layout.partition_path("created", 0).stat().st_size
        plain = work / "plain"
        plain.mkdir()
        plain_cpu, plain_wall = _timed(lambda: _plain_files(plain, partitions, size))
        return stream_cpu, stream_wall, plain_cpu, plain_wall
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", default="1000,10000", help="comma-separated partition counts")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--root", type=Path, default=None, help="directory for the streams (default: $TMPDIR)")
    parser.add_argument("--fsync", action="store_true", help="create with systems.<s>.fsync=true")
    args = parser.parse_args()
    root = args.root or Path(tempfile.gettempdir())
    print(f"root {root}, fsync {args.fsync}, medians of {args.runs} runs, microseconds per partition\n")
    print("| partitions | stream CPU µs | stream wall µs | plain files CPU µs | plain files wall µs | CPU x plain |")
    print("|---:|---:|---:|---:|---:|---:|")
    for partitions in (int(value) for value in args.partitions.split(",")):
        runs = [measure(root, partitions, fsync=args.fsync) for _ in range(args.runs)]
        stream_cpu, stream_wall, plain_cpu, plain_wall = (
            statistics.median(column) * 1e6 / partitions for column in zip(*runs, strict=True)
        )
        print(
            f"| {partitions:,} | {stream_cpu:.0f} | {stream_wall:.0f} | {plain_cpu:.0f} | {plain_wall:.0f} | "
            f"{stream_cpu / plain_cpu:.2f}x |"
        )


if __name__ == "__main__":
    main()
