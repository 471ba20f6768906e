"""Pass-through over the embedded log: millstream vs. a raw read of the same partitions, in one run.

    python -m benchmarks.passthrough_log [--messages 1000000] [--partitions 4] [--size 100] [--rounds 3]
                                         [--no-spark]

Every figure comes from the same data in the same run, so the ratios hold whatever the machine:
  raw read      the log consumer's poll loop alone (benchmarks/log_raw_read.py)
  no-op job     millstream reading every message into a task that does nothing (1 container)
  pass-through  millstream copying every message to another log stream (1 container, in-process)
  batch API     the pass-through as a ``BatchStreamTask`` sending each batch with ``send_batch``
  commit 100 ms the pass-through at-least-once, committing as often as exactly-once does
  exactly-once  the pass-through under ``task.processing.guarantee=exactly-once`` (checkpoints in the log,
                a transaction committed every 100 ms, the guarantee's default)
  spark         the pass-through through the Spark runner with 2 containers (2 Python workers), once after the rounds
Per-container rate = the container's messages / the time from its first to its last message.

Each round reads the data raw (the faster of two reads: a slow one would flatter the jobs) and then runs
each job, and a job's ratio is taken against the raw read of its own round: on a shared machine the raw
read moves by a third from one minute to the next, and a ratio of two figures taken minutes apart moves
with it. Rates and ratios are the medians over the rounds.

At the default 1M messages of 100 B no output partition fills its first 64 MiB segment; ``--messages 3000000``
or more measures the steady state, new segments included.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
from pathlib import Path
from statistics import median

from benchmarks.log_jobs import log_job_config, reset_output
from benchmarks.log_raw_read import raw_read_rate, write_messages
from millstream.config.settings import Settings
from millstream.coordinator.job_result import JobResult
from millstream.embedded.log.factory import LogSystemFactory
from millstream.testing import InProcessRunner

EXACTLY_ONCE = {"task.processing.guarantee": "exactly-once", "task.checkpoint.factory": "log", "task.commit.ms": 100}
JOBS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("no-op job, 1 container", "benchmarks.tasks:NoOp", {}),
    ("pass-through, 1 container", "benchmarks.tasks:BytesPassThrough", {}),
    ("pass-through, batch API", "benchmarks.tasks:BytesPassThroughBatch", {}),
    ("pass-through, commit 100 ms", "benchmarks.tasks:BytesPassThrough", {"task.commit.ms": 100}),
    ("pass-through, exactly-once", "benchmarks.tasks:BytesPassThrough", EXACTLY_ONCE),
)


def rate(result: JobResult) -> float:
    """The job's messages over its slowest container's processing time."""
    assert result.outcome == "finished", result.error
    return result.messages / max(c.processing_seconds for c in result.containers)


def run_job(
    root: Path,
    partitions: int,
    name: str,
    task: str,
    containers: int = 1,
    spark: bool = False,
    extra: dict[str, object] | None = None,
) -> float:
    """Run ``task`` over the input into an emptied output; its rate."""
    reset_output(root, partitions)
    os.sync()
    config = log_job_config(root, name, task, containers=containers, extra=extra)
    if spark:
        from millstream.spark.run.runner import SparkJobRunner

        return rate(SparkJobRunner(config).run())
    before = _cpu_seconds()
    result = InProcessRunner(config).run()
    CPU_US[name] = (_cpu_seconds() - before) / max(result.messages, 1) * 1e6
    return rate(result)


CPU_US: dict[str, float] = {}
"""Per in-process run, its CPU time (this process's user + system: the container runs in it) per message, in
microseconds: what a loaded machine disturbs far less than a rate."""


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def line(name: str, rates: list[float], ratios: list[float], cpu: list[float]) -> str:
    spread = ", ".join(f"{ratio:.0%}" for ratio in ratios)
    return (
        f"{name:<28}{median(rates):>12,.0f} msgs/s  {median(ratios):>6.0%} of raw read  "
        f"{median(cpu):>6.2f} us CPU/msg   (rounds: {spread})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3, help="raw read then every job, this many times")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark runner measurement")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-"))
    try:
        write = write_messages(root / "log", "bench", args.partitions, args.messages, args.size)
        admin = LogSystemFactory().get_admin("log", Settings({"systems.log.path": str(root / "log")}))
        admin.seal_stream("bench")
        print(
            f"{args.messages:,} messages of {args.size} B over {args.partitions} partitions (written at {write:,.0f}/s)"
        )
        figures: dict[str, tuple[list[float], list[float], list[float]]] = {name: ([], [], []) for name, _, _ in JOBS}
        raws: list[float] = []
        for round_number in range(args.rounds):
            os.sync()  # the last job's output written back first, not while the next figure is taken
            raw = max(raw_read_rate(root / "log", "bench", args.partitions) for _ in range(2))
            raws.append(raw)
            for index, (name, task, extra) in enumerate(JOBS):
                run = f"{round_number}-{index}"
                job_rate = run_job(root, args.partitions, run, task, extra=extra)
                figures[name][0].append(job_rate)
                figures[name][1].append(job_rate / raw)
                figures[name][2].append(CPU_US[run])
        print(f"{'raw read (log consumer)':<28}{median(raws):>12,.0f} msgs/s  {1:>6.0%}")
        for name, (rates, ratios, cpu) in figures.items():
            print(line(name, rates, ratios, cpu))
        if not args.no_spark:
            task = "benchmarks.tasks:BytesPassThrough"
            spark = run_job(root, args.partitions, "spark", task, containers=2, spark=True)
            one = median(figures["pass-through, 1 container"][0])
            print(f"{'pass-through, Spark, 2 ctrs':<28}{spark:>12,.0f} msgs/s  {spark / one:>6.2f}x one container")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
