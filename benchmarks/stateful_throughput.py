"""Stateful count-per-key vs. pass-through over the embedded log, in one run.

    python -m benchmarks.stateful_throughput [--messages 1000000] [--partitions 4] [--keys 100000] [--size 100]

The same keyed messages (``--keys`` distinct keys) go through one in-process container:
  pass-through        every message copied to another stream
  count, changelog    a RocksDB store read and written per message, every write also sent to its changelog
  count, blob store   the same store backed up to the local blob store at each commit instead
  count, in-memory    an in-memory store with a changelog
Each stateful job emits the new count per message, so the difference to the pass-through is the
cost of the state. Commits every 10 s; rates are messages / time from the first to the last message.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.log_jobs import log_job_config, reset_output
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.job_result import JobResult
from millstream.embedded.log.factory import LogSystemFactory
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.testing import InProcessRunner


def write_keyed(root: Path, partitions: int, messages: int, keys: int, size: int) -> None:
    config = Settings({"systems.log.path": str(root / "log")})
    factory = LogSystemFactory()
    factory.get_admin("log", config).create_stream(StreamSpec("log", "bench", partitions))
    producer = factory.get_producer("log", config)
    producer.start()
    stream = SystemStream("log", "bench")
    value = os.urandom(size)
    for index in range(messages):
        producer.send("bench", OutgoingMessageEnvelope(stream, value, b"key%08d" % (index % keys)))
    producer.flush("bench")
    producer.stop()
    factory.get_admin("log", config).seal_stream("bench")


def rate(result: JobResult) -> float:
    assert result.outcome == "finished", result.error
    return result.messages / max(c.processing_seconds for c in result.containers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-stateful-"))
    store = {"stores.counts.factory": "rocksdb"}
    runs = [
        ("pass-through", "benchmarks.tasks:BytesPassThrough", {}),
        ("count, changelog", "benchmarks.state_tasks:BytesCountPerKey",
         {**store, "stores.counts.changelog": "log.counts-changelog"}),
        ("count, blob store", "benchmarks.state_tasks:BytesCountPerKey",
         {**store, "stores.counts.backup.factories": "blobstore", "task.checkpoint.read.versions": "2,1"}),
        ("count, in-memory+changelog", "benchmarks.state_tasks:BytesCountPerKey",
         {"stores.counts.factory": "inmemory", "stores.counts.changelog": "log.counts-changelog-mem"}),
    ]  # fmt: skip
    try:
        write_keyed(root, args.partitions, args.messages, args.keys, args.size)
        print(
            f"{args.messages:,} messages of {args.size} B, {args.keys:,} keys, {args.partitions} partitions, "
            "1 container, in-process"
        )
        baseline = None
        for index, (name, task, extra) in enumerate(runs):
            reset_output(root, args.partitions)
            started = time.perf_counter()
            result = InProcessRunner(log_job_config(root, str(index), task, extra=extra)).run()
            wall = time.perf_counter() - started
            messages_per_second = rate(result)
            baseline = baseline or messages_per_second
            print(
                f"{name:<28}{messages_per_second:>12,.0f} msgs/s  {messages_per_second / baseline:>6.0%} of "
                f"pass-through   (wall {wall:.1f}s incl. start-up and restore)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
