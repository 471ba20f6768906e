"""What fencing a container's writes costs on the produce and commit paths, with and without, in one run.

    python -m benchmarks.writer_fencing [--records 200000] [--rounds 5]

* **produce**: the embedded log's producer sending ``--records`` 100-byte records and flushing, as a
  container's producer does (batches of 1000), with a writer token (every append checks and records it in
  its transaction) and without;
* **small appends**: appends of 1 and 10 records (a commit's flush of a quiet partition), where the check's
  fixed cost weighs most;
* **commit**: the owner-file lock taken around a store's checkpoint and cleanup at each commit.
Rounds alternate the variants and which of them goes first, so drift on a shared machine hits both; the
best round of each is reported.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from millstream.contracts.systems import StreamSpec, WriterToken
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.storage import LogPartition
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.storage.ownership import claim, owned

WRITER = WriterToken("bench-1", "0", 1, 1)


def produce(root: Path, records: int, writer: WriterToken | None) -> float:
    layout = LogLayout(root)
    stream = f"s{time.monotonic_ns()}"
    LogSystemAdmin("log", layout).create_stream(StreamSpec("log", stream, 1))
    producer = LogSystemProducer("log", layout)
    if writer is not None:
        producer.set_writer(writer)
    value = os.urandom(100)
    target = SystemStream("log", stream)
    started = time.perf_counter()
    for index in range(records):
        producer.send("bench", OutgoingMessageEnvelope(target, value, b"key%08d" % index))
    producer.flush("bench")
    elapsed = time.perf_counter() - started
    producer.stop()
    return elapsed


def small_appends(root: Path, size: int, appends: int, writer: WriterToken | None) -> float:
    log = LogPartition(root / f"p{time.monotonic_ns()}.db", "s", 0, create=True)
    values = [os.urandom(100)] * size
    timestamps = [1_000] * size
    started = time.perf_counter()
    for _ in range(appends):
        log.append_columns(timestamps, None, values, None, writer)
    elapsed = time.perf_counter() - started
    log.close()
    return elapsed / appends


def owner_lock(root: Path, calls: int) -> float:
    store_dir = root / "counts" / "Partition_0@1.1"
    claim(store_dir, WRITER)
    started = time.perf_counter()
    for _ in range(calls):
        with owned(store_dir, WRITER):
            pass
    return (time.perf_counter() - started) / calls


def best(rounds: int, measure: Callable[[WriterToken | None], float]) -> tuple[float, float]:
    without: list[float] = []
    with_writer: list[float] = []
    for round_ in range(rounds):  # alternate which goes first: the second of a pair is measurably favoured
        pair = [(without, None), (with_writer, WRITER)]
        for results, writer in pair if round_ % 2 == 0 else reversed(pair):
            results.append(measure(writer))
    return min(without), min(with_writer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="millstream-bench-fencing-") as directory:
        root = Path(directory)
        plain, fenced = best(args.rounds, lambda writer: produce(root, args.records, writer))
        print(
            f"produce {args.records} records: without {args.records / plain:,.0f}/s, with a writer "
            f"{args.records / fenced:,.0f}/s (time ratio {fenced / plain:.3f})"
        )
        for size in (1, 10):
            plain, fenced = best(args.rounds, lambda writer, size=size: small_appends(root, size, 2000, writer))
            print(
                f"append of {size} record(s): without {plain * 1e6:.1f} us, with a writer {fenced * 1e6:.1f} us "
                f"(ratio {fenced / plain:.3f})"
            )
        lock = min(owner_lock(root, 2000) for _ in range(args.rounds))
        print(f"owner lock per store and commit step: {lock * 1e6:.1f} us")


if __name__ == "__main__":
    main()
