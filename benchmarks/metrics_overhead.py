"""What metrics cost a pass-through job: the same data, metrics off and on, alternated, in one run.

    python -m benchmarks.metrics_overhead [--messages 500000] [--partitions 4] [--size 100] [--rounds 3]

Each round runs the in-process pass-through (1 container) once with metrics off and once with metrics on
(``metrics.enabled=true``: per-partition counters, process timers, the lag refresh and snapshots shipped
every ``--interval-ms``). The best rate of each is compared, and the ratio on/off printed; it is not
asserted, since a shared machine moves it by a few percent either way.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from benchmarks.log_jobs import log_job_config, reset_output
from benchmarks.log_raw_read import write_messages
from millstream.config.settings import Settings
from millstream.embedded.log.factory import LogSystemFactory
from millstream.testing import InProcessRunner


def rate(root: Path, run: str, partitions: int, metrics: dict[str, str]) -> float:
    """Messages per second from the container's first to its last message."""
    reset_output(root, partitions)
    config = log_job_config(root, run, "benchmarks.tasks:BytesPassThrough", extra=metrics)
    result = InProcessRunner(config).run()
    assert result.outcome == "finished", result.error
    (container,) = result.containers
    return container.messages / container.processing_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval-ms", type=int, default=1000, help="metrics.snapshot.interval.ms when on")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-"))
    try:
        write_messages(root / "log", "bench", args.partitions, args.messages, args.size)
        LogSystemFactory().get_admin("log", Settings({"systems.log.path": str(root / "log")})).seal_stream("bench")
        print(f"{args.messages:,} messages of {args.size} B over {args.partitions} partitions, pass-through")
        on = {"metrics.enabled": "true", "metrics.snapshot.interval.ms": str(args.interval_ms)}
        off_rates, on_rates = [], []
        for round_ in range(args.rounds):
            off_rates.append(rate(root, f"off-{round_}", args.partitions, {}))
            on_rates.append(rate(root, f"on-{round_}", args.partitions, on))
            print(f"round {round_ + 1}: metrics off {off_rates[-1]:>12,.0f} msgs/s   on {on_rates[-1]:>12,.0f} msgs/s")
        best_off, best_on = max(off_rates), max(on_rates)
        print(f"best: off {best_off:,.0f} msgs/s, on {best_on:,.0f} msgs/s; on/off = {best_on / best_off:.3f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
