"""Event time across two stages: the same windows as one job, as two jobs, and drained.

    cd examples/event_time
    python run.py        # the three runs below on Spark local mode; exits 1 if a count is wrong

1. **One job** on a sealed (bounded) input: `millstream run job.yaml`. Watermarks and end-of-stream cross
   the intermediate stream in-band; the job ends by itself once every window fired.
2. **Two jobs**, one per stage: `millstream run job.yaml --stage 0`, then `millstream run job.yaml
   --stage 1` (they may as well run at the same time). Stage 1 learns event time and the end of the input
   only from what stage 0 wrote into the intermediate stream, and emits the same counts.
3. **Drain** on an unsealed (unbounded) input: `millstream run job.yaml` keeps waiting for clicks; the
   windows whose end the watermark passed have fired, the last minute is still open. `millstream job
   drain job.yaml` stops the job cleanly: it fires the open window as end-of-stream would, and ends with
   the outcome `drained` (exit code 0).

Each run starts from an empty data directory (``--data-dir``, default ``.millstream`` here).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from millstream import Job, JobResult, SystemStream

HERE = Path(__file__).parent
CLICKS, COUNTS = SystemStream("log", "clicks"), SystemStream("log", "clicks-per-minute")
USERS, PER_PARTITION, START_MS = 3, 80, 1_700_000_040_000  # START_MS is on a minute boundary


def write_clicks(job: Job, *, sealed: bool) -> Counter[tuple[str, int, int]]:
    """Two partitions of clicks 1.5 s of event time apart; returns the (user, minute, clicks) expected."""
    job.streams.create(CLICKS, 2)
    job.streams.create(COUNTS, 1)
    per_window: Counter[tuple[str, int]] = Counter()
    for partition in (0, 1):
        clicks = []
        for i in range(PER_PARTITION):
            user, ts = f"user-{(i + partition) % USERS}", START_MS + i * 1_500 + partition * 700
            clicks.append((f"session-{partition}-{i // 10}", {"user": user, "ts": ts}))
            per_window[user, ts - ts % 60_000] += 1
        job.streams.write(CLICKS, clicks, partition=partition)
    if sealed:
        job.streams.seal(CLICKS)
    return Counter({(user, minute, clicks) for (user, minute), clicks in per_window.items()})


def emitted(job: Job) -> Counter[tuple[str, int, int]]:
    return Counter((r["user"], r["minute"], r["clicks"]) for _, r in job.streams.read(COUNTS)[0])


def job_in(data_dir: Path, **overrides: Any) -> Job:
    shutil.rmtree(data_dir, ignore_errors=True)
    return Job.from_file(HERE / "job.yaml", {"job.data.dir": str(data_dir), **overrides})


def one_job(data_dir: Path, spark: Any) -> bool:
    job = job_in(data_dir)
    expected = write_clicks(job, sealed=True)
    result = job.run(spark=spark)
    return report("one job", result, emitted(job), expected)


def two_jobs(data_dir: Path, spark: Any) -> bool:
    expected = write_clicks(job_in(data_dir), sealed=True)
    stages = [Job.from_file(HERE / "job.yaml", {"job.data.dir": str(data_dir), "app.stage": s}) for s in (0, 1)]
    first = stages[0].run(spark=spark)  # stage 0 writes the intermediate stream, then ends
    print(f"stage 0 job: {first.outcome}")
    second = stages[1].run(spark=spark)
    return first.outcome == "finished" and report("stage 1 job", second, emitted(stages[1]), expected)


def drained(data_dir: Path, spark: Any) -> bool:
    job = job_in(data_dir)
    expected = write_clicks(job, sealed=False)
    outcome: list[JobResult] = []
    running = threading.Thread(target=lambda: outcome.append(job.run(spark=spark)))
    running.start()
    deadline = time.monotonic() + 120
    while not (lag := job.status().lag) or any(row.lag != 0 for row in lag):  # every click checkpointed
        if time.monotonic() > deadline:
            raise SystemExit("gave up after 120 s waiting for the job to checkpoint every click")
        time.sleep(0.2)
    before = emitted(job)
    command = ["job", "drain", str(HERE / "job.yaml"), "--set", f"job.data.dir={data_dir}"]
    print("$ millstream", " ".join(command))
    subprocess.run([sys.executable, "-m", "millstream.cli.main", *command], check=True)
    running.join()
    print(f"  before the drain {sum(before.values())} windows had fired; the drain fired the rest")
    return report("drained job", outcome[0], emitted(job), expected, outcome="drained")


def report(what: str, result: JobResult, got: Counter[Any], expected: Counter[Any], outcome: str = "finished") -> bool:
    ok = result.outcome == outcome and got == expected
    print(f"{what}: {result.outcome}, {sum(got.values())} windows, {'as expected' if ok else 'WRONG'}")
    if not ok:
        print(f"  missing {sorted(expected - got)}, unexpected {sorted(got - expected)} {result.error or ''}")
    return ok


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=HERE / ".millstream")
    parser.add_argument("--only", choices=["one", "stages", "drain"], help="run one of the three runs")
    args = parser.parse_args(argv)
    runs = {"one": one_job, "stages": two_jobs, "drain": drained}
    chosen = [args.only] if args.only else list(runs)
    results = [runs[name](args.data_dir / name, spark) for name in chosen]
    if not all(results):
        return 1
    print("OK: every (user, minute) count was emitted exactly once, complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
