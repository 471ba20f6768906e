"""Write and raw read rates of the embedded log: messages per second through its producer and consumer.

    python -m benchmarks.log_raw_read [--messages 1000000] [--partitions 4] [--size 100] [--runs 3]
                                      [--write-runs 1]

Writes the messages with the log's producer (``send`` of keyless envelopes pinned round the
partitions, then one ``flush``; with the default ``producer.batch.size`` every append stores a batch
of 1000 records) into a temporary directory and reports the write rate, then reads every partition
from offset 0 with ``LogSystemConsumer.poll`` until each reaches the upcoming offset it had when the
read began. Nothing is done with the envelopes: this is the ceiling the framework's pass-through
rate is compared with. On a shared machine take the best of several runs (``--runs`` read passes,
``--write-runs`` writes of the same messages to fresh streams).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.embedded.log.factory import LogSystemFactory
from millstream.model import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

SYSTEM = "log"


def _config(root: Path) -> Config:
    return Settings({f"systems.{SYSTEM}.path": str(root)})


def write_messages(root: Path, stream: str, partitions: int, messages: int, size: int = 100) -> float:
    """Create ``stream`` and write ``messages`` keyless values of ``size`` bytes; return messages/s."""
    factory = LogSystemFactory()
    config = _config(root)
    factory.get_admin(SYSTEM, config).create_stream(StreamSpec(SYSTEM, stream, partitions))
    producer = factory.get_producer(SYSTEM, config)
    producer.start()
    system_stream = SystemStream(SYSTEM, stream)
    value = os.urandom(size)
    started = time.perf_counter()
    for index in range(messages):
        producer.send("bench", OutgoingMessageEnvelope(system_stream, value, partition=index % partitions))
    producer.flush("bench")
    elapsed = time.perf_counter() - started
    producer.stop()
    return messages / elapsed


def raw_read_rate(root: Path, stream: str, partitions: int) -> float:
    """Read every record of ``stream`` (log root ``root``) from offset 0; return messages/s."""
    factory = LogSystemFactory()
    config = _config(root)
    ssps = {SystemStreamPartition(SYSTEM, stream, partition) for partition in range(partitions)}
    metadata = factory.get_admin(SYSTEM, config).get_ssp_metadata(ssps)
    ends = {ssp: int(metadata[ssp].upcoming_offset) for ssp in ssps}
    consumer = factory.get_consumer(SYSTEM, config)
    for ssp in ssps:
        consumer.register(ssp, metadata[ssp].oldest_offset or metadata[ssp].upcoming_offset)
    consumer.start()
    remaining = {ssp for ssp in ssps if ends[ssp] > int(metadata[ssp].oldest_offset or ends[ssp])}
    count = 0
    started = time.perf_counter()
    while remaining:
        for ssp, envelopes in consumer.poll(remaining, 0.1).items():
            if envelopes[-1].is_end_of_stream:
                remaining.discard(ssp)
                count += len(envelopes) - 1
                continue
            count += len(envelopes)
            if int(envelopes[-1].offset) + 1 >= ends[ssp]:
                remaining.discard(ssp)
    elapsed = time.perf_counter() - started
    consumer.stop()
    return count / max(elapsed, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3, help="read passes over the same data; best is reported")
    parser.add_argument("--write-runs", type=int, default=1, help="writes, each to a new stream; best is reported")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="millstream-bench-") as directory:
        root = Path(directory)
        writes = [
            write_messages(root, "bench" if run == 0 else f"bench-{run}", args.partitions, args.messages, args.size)
            for run in range(max(args.write_runs, 1))
        ]
        detail = f" (best of {len(writes)}: {', '.join(f'{r:,.0f}' for r in writes)})" if len(writes) > 1 else ""
        print(
            f"write: {max(writes):,.0f} msgs/s ({args.messages:,} x {args.size} B, {args.partitions} partitions)"
            + detail
        )
        rates = [raw_read_rate(root, "bench", args.partitions) for _ in range(args.runs)]
        print(f"raw read: {max(rates):,.0f} msgs/s (best of {args.runs}: {', '.join(f'{r:,.0f}' for r in rates)})")


if __name__ == "__main__":
    main()
