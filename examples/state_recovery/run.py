"""Crash a stateful job mid-run and check that the restored counts are exact.

    cd examples/state_recovery
    python run.py --backend changelog     # or --backend blobstore; exits 1 if a count is wrong

What it does, on Spark local mode with the embedded log, SQLite and a local blob store:

1. writes 300 words to each of two partitions and starts the job (`millstream run changelog.yaml`);
2. once every word is counted and checkpointed, writes 300 more and SIGKILLs container 0 at once, as a
   lost machine would (find the pid with `millstream job status changelog.yaml`);
3. Spark starts the container again; it restores its stores to their last checkpoint (replaying the
   changelog, or downloading the snapshot from the blob store), and reads on from that checkpoint's
   offsets, so words it counted after that checkpoint are counted once more on top of the restored
   state, not twice;
4. seals the input; each task reports its store at end-of-stream, and the counts must equal the words
   written. Commits are asynchronous: the task keeps processing while a commit thread uploads.

It starts from an empty data directory every time (``--data-dir``, default ``.millstream`` here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from millstream import Job, JobResult, SystemStream

HERE = Path(__file__).parent
WORDS, COUNTS = SystemStream("log", "words"), SystemStream("log", "word-counts")
VOCABULARY = ["apple", "banana", "cherry", "damson", "elder", "fig", "grape"]
PER_PARTITION = 300  # words per partition in each half
T = TypeVar("T")


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 120) -> T:
    deadline = time.monotonic() + timeout
    while (value := probe()) is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {timeout} s waiting for {what}")
        time.sleep(0.1)
    return value


def write_half(job: Job, half: int) -> Counter[str]:
    """Write one half of the input; returns what each word count must grow by, per partition."""
    written: Counter[str] = Counter()
    for partition in (0, 1):
        words = [VOCABULARY[(i * (partition + 2) + half) % len(VOCABULARY)] for i in range(PER_PARTITION)]
        job.streams.write(WORDS, [(word, {"word": word}) for word in words], partition=partition)
        written.update(f"Partition {partition}/{word}" for word in words)
    return written


def checkpointed_container(job: Job) -> int | None:
    """Container 0's pid once every partition is processed and checkpointed (lag 0), else None."""
    status = job.status()
    container = status.containers.get("0", {})
    if status.lag and all(row.lag == 0 for row in status.lag) and container.get("state") == "running":
        return int(container["pid"])
    return None


def run_with_a_crash(job: Job, spark: Any) -> tuple[JobResult, Counter[str]]:
    expected = write_half(job, 0)
    outcome: list[JobResult] = []
    running = threading.Thread(target=lambda: outcome.append(job.run(spark=spark)))
    running.start()
    pid = wait_for(lambda: checkpointed_container(job), "the first half to be counted and checkpointed")
    expected += write_half(job, 1)
    os.kill(pid, signal.SIGKILL)
    print(f"SIGKILLed container 0 (pid {pid}) as the second half arrived")
    job.streams.seal(WORDS)
    running.join()
    return outcome[0], expected


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["changelog", "blobstore"], default="changelog")
    parser.add_argument("--data-dir", type=Path, default=HERE / ".millstream")
    args = parser.parse_args(argv)
    shutil.rmtree(args.data_dir, ignore_errors=True)
    job = Job.from_file(HERE / f"{args.backend}.yaml", {"job.data.dir": str(args.data_dir)})
    job.streams.create(WORDS, 2)
    job.streams.create(COUNTS, 1)

    result, expected = run_with_a_crash(job, spark)
    restarts = sum(container.epoch - 1 for container in result.containers)
    print(f"job {result.outcome}; containers started again: {restarts}")
    reports = [report for _, report in job.streams.read(COUNTS)[0]]
    counted = Counter({f"{r['task']}/{word}": n for r in reports for word, n in r["counts"].items()})
    for name in sorted(expected):
        print(f"{name:<24}{counted[name]:>5} (expected {expected[name]})")
    if result.outcome != "finished" or restarts < 1 or counted != expected:
        print(f"WRONG: outcome {result.outcome}, {restarts} restarts, counts as above ({result.error or ''})")
        return 1
    print(f"OK: the {args.backend} backend restored every count exactly after the crash")
    return 0


if __name__ == "__main__":
    sys.exit(main())
