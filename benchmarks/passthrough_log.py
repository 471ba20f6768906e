"""Pass-through over the embedded log: millstream vs. a raw read of the same partitions, in one run.

    python -m benchmarks.passthrough_log [--messages 1000000] [--partitions 4] [--size 100] [--no-spark]

Every figure comes from the same data in the same run, so the ratios hold whatever the machine:
  raw read      the log consumer's poll loop alone (benchmarks/log_raw_read.py)
  no-op job     millstream reading every message into a task that does nothing (1 container)
  pass-through  millstream copying every message to another log stream (1 container, in-process)
  batch API     the pass-through as a ``BatchStreamTask`` sending each batch with ``send_batch``
  spark         the pass-through through the Spark runner with 2 containers (2 Python workers)
Per-container rate = the container's messages / the time from its first to its last message.

At the default 1M messages of 100 B no output partition fills its first 64 MiB segment; ``--messages 3000000``
or more measures the steady state, new segments included.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.log_jobs import log_job_config, reset_output
from benchmarks.log_raw_read import raw_read_rate, write_messages
from millstream.config import Config
from millstream.coordinator.job_result import JobResult
from millstream.systems.log.factory import LogSystemFactory
from millstream.testing import InProcessRunner


def report(name: str, result: JobResult, wall: float, raw: float) -> None:
    assert result.outcome == "finished", result.error
    per_container = [c.messages / c.processing_seconds for c in result.containers if c.processing_seconds > 0]
    aggregate = result.messages / max(c.processing_seconds for c in result.containers)
    print(
        f"{name:<28}{aggregate:>12,.0f} msgs/s  {aggregate / raw:>6.0%} of raw read   per container: "
        + ", ".join(f"{rate:,.0f}" for rate in per_container)
        + f"   (wall {wall:.1f}s incl. start-up)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark runner measurement")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-"))
    try:
        write = write_messages(root / "log", "bench", args.partitions, args.messages, args.size)
        admin = LogSystemFactory().get_admin("log", Config({"systems.log.path": str(root / "log")}))
        admin.seal_stream("bench")
        print(
            f"{args.messages:,} messages of {args.size} B over {args.partitions} partitions (written at {write:,.0f}/s)"
        )
        raw = max(raw_read_rate(root / "log", "bench", args.partitions) for _ in range(2))
        print(f"{'raw read (log consumer)':<28}{raw:>12,.0f} msgs/s  {1:>6.0%}")
        runs = [
            ("no-op job, 1 container", "benchmarks.tasks:NoOp", 1),
            ("pass-through, 1 container", "benchmarks.tasks:BytesPassThrough", 1),
            ("pass-through, batch API", "benchmarks.tasks:BytesPassThroughBatch", 1),
        ]
        for index, (name, task, containers) in enumerate(runs):
            reset_output(root, args.partitions)
            started = time.perf_counter()
            result = InProcessRunner(log_job_config(root, str(index), task, containers=containers)).run()
            report(name, result, time.perf_counter() - started, raw)
        if not args.no_spark:
            from millstream.spark.runner import SparkJobRunner

            reset_output(root, args.partitions)
            config = log_job_config(root, "spark", "benchmarks.tasks:BytesPassThrough", containers=2)
            started = time.perf_counter()
            result = SparkJobRunner(config).run()
            report("pass-through, Spark, 2 ctrs", result, time.perf_counter() - started, raw)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
