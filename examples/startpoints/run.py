"""Rewind one partition of a running job to a point in time, and see the records it reads again.

    cd examples/startpoints
    python run.py        # the scenario below on Spark local mode; exits 1 if the output is wrong

The scenario, as you would type it in two terminals:

    millstream streams create job.yaml log.clicks --partitions 2
    millstream streams create job.yaml log.click-audit --partitions 2
    millstream streams produce job.yaml log.clicks --file morning.jsonl --format json --key-field user
    # note the time T, then write the afternoon's clicks the same way
    millstream run job.yaml                          # terminal 1: reads everything, then waits for more
    millstream startpoint set job.yaml --stream log.clicks --partition 1 --timestamp T --apply   # terminal 2
    millstream streams consume job.yaml log.click-audit

It starts from an empty data directory every time (``--data-dir``, default ``.millstream`` here).
``--apply`` makes the running job restart its containers: partition 1 starts again at the first record
written at or after T; partition 0 has no startpoint and resumes from its checkpoint.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from millstream import Job, SystemStream

HERE = Path(__file__).parent
CLICKS, AUDIT = SystemStream("log", "clicks"), SystemStream("log", "click-audit")
MORNING, AFTERNOON = 4, 3  # clicks per partition before and after the instant we rewind to


def create_streams(job: Job) -> None:
    for stream in (CLICKS, AUDIT):
        job.streams.delete(stream)
        job.streams.create(stream, 2)


def write_clicks(job: Job, when: str, count: int) -> None:
    for partition in (0, 1):
        clicks = [(f"user-{i}", {"user": f"user-{i}", "when": when}) for i in range(count)]
        job.streams.write(CLICKS, clicks, partition=partition)


def audited(job: Job) -> list[dict[str, Any]]:
    return [audit for pairs in job.streams.read(AUDIT, idle_timeout=0.5).values() for _, audit in pairs]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {timeout} s waiting for {what}")
        time.sleep(0.2)


def rewind(config_path: Path, data_dir: str, instant_ms: int) -> None:
    """The operator's command, run while the job runs."""
    instant = datetime.fromtimestamp(instant_ms / 1000, UTC).isoformat(timespec="milliseconds")
    command = ["startpoint", "set", str(config_path), "--set", f"job.data.dir={data_dir}"]
    command += ["--stream", "log.clicks", "--partition", "1", "--timestamp", instant, "--apply"]
    print("$ millstream", " ".join(command))
    subprocess.run([sys.executable, "-m", "millstream.cli.main", *command], check=True)


def check(audits: list[dict[str, Any]]) -> bool:
    """Every click read once, except partition 1's afternoon clicks: read twice, at the same offsets."""
    reads = Counter((a["partition"], a["offset"], a["click"]["when"]) for a in audits)
    expected = Counter({(p, str(o), "morning"): 1 for p in (0, 1) for o in range(MORNING)})
    for partition, times in ((0, 1), (1, 2)):
        expected.update({(partition, str(o), "afternoon"): times for o in range(MORNING, MORNING + AFTERNOON)})
    for (partition, offset, when), times in sorted(reads.items()):
        print(f"partition {partition} offset {offset:>2} ({when:<9}) read {times}x")
    return reads == expected


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=HERE / "job.yaml")
    parser.add_argument("--data-dir", default=str(HERE / ".millstream"))
    args = parser.parse_args(argv)
    shutil.rmtree(args.data_dir, ignore_errors=True)  # a fresh job: no checkpoints of an earlier run
    job = Job.from_file(args.config, {"job.data.dir": args.data_dir})
    create_streams(job)
    write_clicks(job, "morning", MORNING)
    time.sleep(0.01)  # records carry millisecond timestamps: keep the instant strictly between the batches
    instant = int(time.time() * 1000)
    time.sleep(0.01)
    write_clicks(job, "afternoon", AFTERNOON)

    running = threading.Thread(target=lambda: job.run(spark=spark))
    running.start()
    total = 2 * (MORNING + AFTERNOON)
    wait_for(lambda: len(audited(job)) >= total, "the job to read every click once")
    rewind(args.config, args.data_dir, instant)
    wait_for(lambda: len(audited(job)) >= total + AFTERNOON, "partition 1's afternoon to be read again")
    job.stop()
    running.join()
    if not check(audited(job)):
        print("WRONG: the rewind did not re-read exactly partition 1's afternoon clicks")
        return 1
    print("OK: partition 1 re-read its 3 afternoon clicks; partition 0 went on from its checkpoint")
    return 0


if __name__ == "__main__":
    sys.exit(main())
