"""Soak: a stateful job killed at random through the Spark runner must still give exact results.

    python -m benchmarks.soak [--backend changelog] [--backend blobstore] [--runs 1] [--kills 10] [--seed 1]
                              [--partitions 4] [--records 2500] [--delay-ms 1] [--commit-ms 300]
                              [--kafka] [--bootstrap host:port] [--exactly-once] [--log-exactly-once]

A count-per-key job (``benchmarks.soak_tasks:CountPerKey``, RocksDB, asynchronous commit) reads
``--partitions`` sealed partitions of ``--records`` each, two containers on Spark local mode. While it
runs, a seeded killer SIGKILLs running containers at random moments, and once per run at a commit point
chosen from the backend's (``task.commit.testing.pause.at``: the container pauses there and is killed
in the pause), until ``--kills`` kills were made; Spark retries each container, which restores its
stores and resumes from its checkpoint. Each run then checks what a user relies on:

* the job finished (exit 0 of ``millstream run``);
* every input is reflected in the output, at least once;
* every emitted count is exact: the n-th message of a key in a partition is emitted with count n,
  however often it was replayed (the store and the offsets were restored together);
* each task's final store equals the fault-free result;
* no task's checkpointed offset ever went backwards (sampled while the job runs).

``--exactly-once`` runs the job with ``task.processing.guarantee=exactly-once`` (implies ``--kafka``): its output,
changelog and checkpoints on the broker, committed in one transaction, and the commit points it pauses at are
those of an exactly-once commit; the run must then also find no duplicate (``dup`` is 0: every input is in the
``read_committed`` output exactly once), whatever was killed where. Under exactly-once a broker restart aborts
the open transaction, which fails the containers writing in it: those extra retries are expected.

``--log-exactly-once`` is the same on the embedded log, no broker: output and changelog on the log, the
checkpoints in its transaction coordinator (``task.checkpoint.factory: log``), committed together; ``dup`` must
be 0 as well.

``--kafka`` keeps the checkpoints in Kafka (``task.checkpoint.factory: kafka``) and restarts the broker once
in the middle of each run, when the checkpoints cover half the input, while the killer goes on; the run
must then also find no ``FencedError`` in the containers' logs, and its ``restart`` column is the time from
the broker being up again to the first checkpoint read after it stopped (0 when that came before the broker's
readiness check passed: clients reach it sooner). Without ``--bootstrap`` the broker is started from the
test harness's JARs (``make kafka-jars``), which is also what makes it restartable.

It prints one row per run: backend, seed, commit point, kills, container retries, duplicate ratio
(outputs re-emitted after a kill, per input), seconds, the broker restart's stall and the problems found;
exit code 1 on any problem. The long soak is ``--runs 10 --kills 10`` with both backends plus a ``--kafka``
run; ``tests/spark/test_soak.py`` runs a short one in CI.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import os
import queue
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings as JobSettings
from millstream.contracts import coordination
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.spark.run.runner import SparkJobRunner
from millstream.spark.run.session import build_session
from millstream.testing import read_stream, write_stream

KEYS = 7
INPUT = SystemStream("log", "soak-in")
OUTPUT = SystemStream("log", "soak-out")
COMMIT_POINTS = {
    "changelog": ("after-snapshot", "after-upload", "after-checkpoint"),
    "blobstore": ("after-snapshot", "mid-upload", "after-upload", "after-checkpoint"),
}
EXACTLY_ONCE_POINTS = ("before-snapshot", "after-snapshot", "after-upload", "after-checkpoint")
"""Where an exactly-once commit may be cut: before its checkpoints joined the transaction, or after it committed."""


@dataclass(frozen=True)
class Settings:
    kills: int = 10
    partitions: int = 4
    records: int = 2500
    delay_ms: float = 1.0
    commit_ms: int = 300
    containers: int = 2
    bootstrap: str | None = None
    """The Kafka broker holding the checkpoints (``--kafka``); None: checkpoints in the metadata store."""
    exactly_once: bool = False
    """``task.processing.guarantee=exactly-once``: output, changelog and checkpoints on the broker, or on the
    embedded log without one (``--log-exactly-once``)."""

    def output(self, job_id: str | None) -> SystemStream:
        return SystemStream("kafka", f"soak-out-{job_id}") if self.exactly_once and self.bootstrap else OUTPUT


@dataclass
class SoakResult:
    backend: str
    seed: int
    commit_point: str
    kills: int = 0
    retries: int = 0
    duplicates: float = 0.0
    seconds: float = 0.0
    restart_stall: float | None = None
    """Seconds from the broker being up again to the next checkpoint (``--kafka``)."""
    problems: list[str] = field(default_factory=list)


def soak_config(root: Path, backend: str, settings: Settings, commit_point: str | None) -> JobSettings:
    """The soak job's config; ``commit_point`` None: no pause at a commit point (nothing kills it there)."""
    values = {
        "job.name": "soak",
        "job.data.dir": str(root / "data"),
        "job.container.count": str(settings.containers),
        "job.container.retry.count": str(settings.kills + 2),
        "task.class": "benchmarks.soak_tasks:CountPerKey",
        "task.inputs": f"log.{INPUT.stream}",
        "task.commit.ms": str(settings.commit_ms),
        "systems.log.samza.offset.default": "oldest",
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
        "stores.counts.factory": "rocksdb",
        "stores.counts.key.serde": "string",
        "stores.counts.msg.serde": "json",
        "soak.delay.ms": str(settings.delay_ms),
        "spark.ui.enabled": "false",
    }
    if commit_point is not None:
        values["task.commit.testing.pause.at"] = commit_point
        values["task.commit.testing.pause.ms"] = "60000"
        values["task.commit.testing.marker.dir"] = str(root / "markers")
    if settings.bootstrap is not None:
        values.update(
            {
                "job.id": uuid.uuid4().hex[:12],  # a checkpoint topic of its own on a shared broker
                "task.checkpoint.factory": "kafka",
                "task.checkpoint.system": "kafka",
                "systems.kafka.samza.factory": "kafka",
                "systems.kafka.bootstrap.servers": settings.bootstrap,
            }
        )
    if settings.exactly_once and settings.bootstrap is None:
        values["task.processing.guarantee"] = "exactly-once"
        values["task.checkpoint.factory"] = "log"
        values["stores.counts.changelog"] = "log.soak-counts-changelog"
    elif settings.exactly_once:
        job_id = values["job.id"]
        values["task.processing.guarantee"] = "exactly-once"
        values["soak.output"] = f"kafka.{settings.output(job_id).stream}"
        values["systems.kafka.samza.key.serde"] = "string"
        values["systems.kafka.samza.msg.serde"] = "json"
        values["stores.counts.changelog"] = f"kafka.soak-counts-changelog-{job_id}"
    elif backend == "changelog":
        values["stores.counts.changelog"] = "log.soak-counts-changelog"
    else:
        values["stores.counts.backup.factories"] = "blobstore"
        values["task.checkpoint.read.versions"] = "2,1"
    return prepare(Config(values))


def write_input(config: JobSettings, settings: Settings) -> None:
    """Message ``i`` of every partition is ``i`` with key ``key<i % KEYS>``: its count must be ``i // KEYS + 1``."""
    with system_factory(config, "log").get_admin("log", config) as admin:
        admin.create_stream(StreamSpec("log", INPUT.stream, settings.partitions))
        admin.create_stream(StreamSpec("log", OUTPUT.stream, 1))
        for partition in range(settings.partitions):
            pairs = [(f"key{i % KEYS}", i) for i in range(settings.records)]
            write_stream(config, INPUT, pairs, partition=partition)
        admin.seal_stream(INPUT.stream)
    output = settings.output(config.get("job.id"))
    if output.system != "log":
        with system_factory(config, output.system).get_admin(output.system, config) as admin:
            admin.start()
            admin.create_stream(StreamSpec(output.system, output.stream, 1))


class Killer(threading.Thread):
    """SIGKILLs running containers at seeded random moments, and the one pausing at the commit point."""

    def __init__(self, config: JobSettings, seed: int, kills: int, marker: Path) -> None:
        super().__init__(daemon=True)
        self.store = metadata_store(config)
        self.random = random.Random(seed)
        self.wanted = kills
        self.marker = marker
        self.killed: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while len(self.killed) < self.wanted and not self.done.wait(self.random.uniform(0.4, 1.6)):
            pid = self._paused() or self._running()
            if pid is not None:
                self._kill(pid)

    def _paused(self) -> int | None:
        text = self.marker.read_text().strip() if self.marker.is_file() else ""
        return int(text) if text and int(text) not in self.killed else None

    def _running(self) -> int | None:
        statuses = coordination.container_statuses(self.store).values()
        pids = [int(s["pid"]) for s in statuses if s.get("state") == "running" and int(s["pid"]) not in self.killed]
        return self.random.choice(sorted(pids)) if pids else None

    def _kill(self, pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return  # it ended by itself meanwhile
        self.killed.add(pid)


class CheckpointWatch(threading.Thread):
    """Samples every task's checkpointed offsets while the job runs; any offset that moves back is a problem.

    It notes when the checkpoints moved forward (the broker restart's stall is measured from it), and a
    container reporting a fenced or superseded attempt, which nothing in a soak should cause: a killed
    container reports nothing, its retry fences a dead process."""

    def __init__(self, config: JobSettings) -> None:
        super().__init__(daemon=True)
        self.store = metadata_store(config)
        self.manager = checkpoint_manager(config, self.store)
        self.highest: dict[tuple[str, str], int] = {}
        self.advanced: list[tuple[float, float]] = []
        """When each sample that saw the checkpoints move forward began and ended its read (``time.monotonic()``)."""
        self.problems: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):
            try:
                self._sample()
            except Exception as error:  # the broker is restarting, say: sample again
                print(f"checkpoint watch: {type(error).__name__}: {error}", file=sys.stderr, flush=True)

    def final_sample(self, timeout: float = 120.0) -> None:
        """Once the job ended and the watch stopped: sample until a read succeeds, so checkpoints written after the
        last periodic sample count (a read failing while a restarted broker recovers left them unseen, and the
        restart's stall unmeasured). Raises when no read succeeds within ``timeout`` seconds."""
        self.done.set()
        self.join()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._sample()
                return
            except Exception as error:
                if time.monotonic() >= deadline:
                    raise RuntimeError(f"checkpoint watch: no read succeeded in {timeout:.0f} s: {error}") from error
                time.sleep(0.25)  # a pause between retries of a failing read, not a synchronisation

    def checkpointed(self) -> int:
        """Input messages the checkpoints cover."""
        return sum(offset + 1 for offset in self.highest.values())

    def first_advance_after(self, moment: float) -> float | None:
        """When the first sample that read after ``moment`` saw the checkpoints move forward; None if none did.

        A sample is dated by the start of its read, so one that ended before ``moment`` never counts. One that
        began before ``moment`` and ended after it (its read retried while the broker was down, and read every
        checkpoint written since it came back) is dated by its end: what it saw may have been written then."""
        for began, ended in self.advanced:
            if began >= moment:
                return began
            if ended >= moment:
                return ended
        return None

    def _sample(self) -> None:
        began = time.monotonic()
        if not self.highest:  # a Kafka checkpoint topic appears with the first checkpoint
            self.manager.start()
        moved = False
        for task, checkpoint in self.manager.read_all().items():
            for ssp, offset in checkpoint.offsets.items():
                if offset is None or ssp.system_stream != INPUT:
                    continue
                key, value = (str(task), ssp.key()), int(offset)
                if value < self.highest.get(key, -1):
                    self.problems.append(f"{task}: checkpoint of {ssp.key()} went back to {value}")
                moved = moved or value > self.highest.get(key, -1)
                self.highest[key] = max(value, self.highest.get(key, -1))
        if moved:
            self.advanced.append((began, time.monotonic()))
        for container, status in coordination.container_statuses(self.store).items():
            error = str(status.get("error", ""))
            if status.get("state") == "failed" and ("Fenced" in error or "superseded" in error):
                problem = f"container {container} attempt {status.get('attempt')} was fenced: {error[:200]}"
                if problem not in self.problems:
                    self.problems.append(problem)


class RestartableBroker(Protocol):
    @property
    def stopped_at(self) -> float | None:
        """When the broker's process last ended; clients may use a restarted broker before ``restart`` returns."""

    def restart(self, down_seconds: float = 0.0, timeout: float = 120.0) -> None: ...


class KeptBroker(threading.Thread):
    """Restarts a broker on a thread of its own that lives as long as the harness: a broker's process dies with the
    thread that started it (its parent-death signal is that thread's), so one restarted by a run's thread would be
    gone before the next run (``--runs``)."""

    def __init__(self, broker: RestartableBroker) -> None:
        super().__init__(daemon=True)
        self.broker = broker
        self.requests: queue.Queue[tuple[float, float, concurrent.futures.Future[None]]] = queue.Queue()

    @property
    def stopped_at(self) -> float | None:
        return self.broker.stopped_at

    def restart(self, down_seconds: float = 0.0, timeout: float = 120.0) -> None:
        """Restart the broker on this thread; returns once it is up (or raises what the restart raised)."""
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.requests.put((down_seconds, timeout, done))
        done.result()

    def run(self) -> None:
        while True:
            down_seconds, timeout, done = self.requests.get()
            try:
                self.broker.restart(down_seconds, timeout)
            except BaseException as error:  # handed to the thread that asked
                done.set_exception(error)
            else:
                done.set_result(None)


class BrokerRestart(threading.Thread):
    """Restarts the Kafka broker once, when the checkpoints cover half the input, and notes when it was up."""

    def __init__(self, broker: RestartableBroker, watch: CheckpointWatch, total: int) -> None:
        super().__init__(daemon=True)
        self.broker = broker
        self.watch = watch
        self.total = total
        self.up_at: float | None = None
        self.done = threading.Event()
        self.job_ended = threading.Event()
        """Too late to restart."""

    def run(self) -> None:
        while not self.done.wait(0.2):
            if not self.job_ended.is_set() and self.watch.checkpointed() * 2 >= self.total:
                self.broker.restart(down_seconds=3)  # a KeptBroker: the broker outlives this thread
                self.up_at = time.monotonic()
                return

    def stall(self) -> float | None:
        """:func:`restart_stall` of this restart; None before it."""
        if self.up_at is None or self.broker.stopped_at is None:
            return None
        return restart_stall(self.watch, self.broker.stopped_at, self.up_at)


def restart_stall(watch: CheckpointWatch, stopped_at: float, up_at: float) -> float | None:
    """Seconds from the broker being up (``up_at``) to the first checkpoint read after it stopped; None if none was.

    Clients reach a restarted broker before its readiness check passes, so a checkpoint may come before ``up_at``:
    that is a stall of 0, not a missing one. The watch samples every 0.25 s, so a checkpoint written in the last
    quarter second before the stop, first read after it, also counts: the figure can then be lower than the real
    stall; one first seen by a read that spanned the outage, or by the :meth:`CheckpointWatch.final_sample` after the
    job ended, is dated by that read's end, higher than the real stall."""
    resumed = watch.first_advance_after(stopped_at)
    return None if resumed is None else max(0.0, resumed - up_at)


def check_output(config: JobSettings, settings: Settings) -> tuple[list[str], float]:
    """Problems with the output (missing inputs, wrong counts, wrong final stores); the duplicate ratio."""
    records = [value for _, value in read_stream(config, settings.output(config.get("job.id"))).get(0, [])]
    counts = [r for r in records if "count" in r]
    problems = [
        f"partition {r['p']} message {r['v']} ({r['key']}) emitted count {r['count']}, expected {r['v'] // KEYS + 1}"
        for r in counts
        if r["count"] != r["v"] // KEYS + 1
    ][:5]
    expected = {(p, i) for p in range(settings.partitions) for i in range(settings.records)}
    missing = expected - {(r["p"], r["v"]) for r in counts}
    if missing:
        problems.append(f"{len(missing)} input(s) never reflected in the output, e.g. {sorted(missing)[:3]}")
    final = {r["task"]: r["store"] for r in records if "store" in r}
    reference = dict(Counter(f"key{i % KEYS}" for i in range(settings.records)))
    for task in (f"Partition {p}" for p in range(settings.partitions)):
        if final.get(task) != reference:
            problems.append(f"{task}: final store {final.get(task)} differs from the fault-free {reference}")
    total = settings.partitions * settings.records
    if settings.exactly_once and len(counts) != total:
        problems.append(f"exactly-once: {len(counts) - total} duplicate output(s) in the read_committed output")
    return problems, (len(counts) - total) / total


def run_once(
    backend: str, seed: int, settings: Settings, root: Path, broker: RestartableBroker | None = None
) -> SoakResult:
    commit_point = random.Random(seed).choice(EXACTLY_ONCE_POINTS if settings.exactly_once else COMMIT_POINTS[backend])
    result = SoakResult(backend if broker is None else f"{backend}+kafka", seed, commit_point)
    config = soak_config(root, backend, settings, commit_point)
    write_input(config, settings)
    spark = build_session(config, master=f"local[{settings.containers + 1}]")
    killer = Killer(config, seed, settings.kills, root / "markers" / commit_point)
    watch = CheckpointWatch(config)
    restart = BrokerRestart(broker, watch, settings.partitions * settings.records) if broker is not None else None
    started = time.monotonic()
    threads: list[Killer | CheckpointWatch | BrokerRestart] = [killer, watch, *([restart] if restart else [])]
    for thread in threads:
        thread.start()
    try:
        job: JobResult = SparkJobRunner(config, spark=spark).run()
        if restart is not None:
            restart.job_ended.set()
        return _checked(result, job, config, settings, started, killer, watch, restart)
    finally:
        for thread in threads:
            thread.done.set()
        for thread in threads:
            thread.join()


def _checked(
    result: SoakResult,
    job: JobResult,
    config: JobSettings,
    settings: Settings,
    started: float,
    killer: Killer,
    watch: CheckpointWatch,
    restart: BrokerRestart | None,
) -> SoakResult:
    """The run's figures and problems, once the killer and the checkpoint watch stopped."""
    killer.done.set()
    killer.join()
    watch.final_sample()
    result.seconds = time.monotonic() - started
    result.kills = len(killer.killed)
    result.retries = sum(container.epoch - 1 for container in job.containers)
    if job.outcome != "finished":
        result.problems.append(f"the job ended {job.outcome}: {job.error}")
        return result
    output_problems, result.duplicates = check_output(config, settings)
    result.problems += watch.problems[:5] + output_problems
    if result.kills < settings.kills:
        result.problems.append(f"only {result.kills} kill(s) before the job ended: raise --records or --delay-ms")
    if restart is not None:
        result.restart_stall = restart.stall()
        if restart.up_at is None:
            result.problems.append("the broker was not restarted before the job ended: raise --records")
        if result.retries > result.kills and not settings.exactly_once:
            result.problems.append(f"{result.retries - result.kills} attempt(s) ended without being killed")
    return result


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=sorted(COMMIT_POINTS), help="repeatable; default both")
    parser.add_argument("--runs", type=int, default=1, help="runs per backend, seeds --seed, --seed + 1, ...")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kills", type=int, default=Settings.kills)
    parser.add_argument("--partitions", type=int, default=Settings.partitions)
    parser.add_argument("--records", type=int, default=Settings.records, help="messages per partition")
    parser.add_argument("--delay-ms", type=float, default=Settings.delay_ms, help="processing time per message")
    parser.add_argument("--commit-ms", type=int, default=Settings.commit_ms)
    parser.add_argument("--kafka", action="store_true", help="checkpoints in Kafka, the broker restarted once per run")
    parser.add_argument(
        "--exactly-once", action="store_true", help="task.processing.guarantee=exactly-once (implies --kafka)"
    )
    parser.add_argument(
        "--log-exactly-once", action="store_true", help="task.processing.guarantee=exactly-once on the embedded log"
    )
    parser.add_argument("--bootstrap", help="with --kafka: a broker the harness can restart (default: start one)")
    args = parser.parse_args(argv)
    if args.log_exactly_once:
        if args.kafka or args.exactly_once:
            parser.error("--log-exactly-once runs without a broker: drop --kafka and --exactly-once")
        args.exactly_once = True
    elif args.exactly_once:
        args.kafka = True
    if args.exactly_once:
        args.backend = args.backend or ["changelog"]
        if "blobstore" in args.backend:
            parser.error("--exactly-once refuses blob-store stores (their uploads cannot join the transaction)")
    settings = Settings(
        args.kills, args.partitions, args.records, args.delay_ms, args.commit_ms, exactly_once=args.exactly_once
    )
    return args, settings


def main(argv: list[str] | None = None) -> int:
    args, settings = parse_args(sys.argv[1:] if argv is None else argv)
    with contextlib.ExitStack() as resources:
        broker: RestartableBroker | None = None
        if args.kafka:
            from tests.integration.kafka_broker import KafkaBroker  # the harness's broker restarts on its ports

            root = Path(resources.enter_context(tempfile.TemporaryDirectory(prefix="millstream-soak-broker-")))
            started = resources.enter_context(KafkaBroker(root, log_level="WARN"))
            settings = dataclasses.replace(settings, bootstrap=started.bootstrap_servers)
            kept = KeptBroker(started)
            kept.start()
            broker = kept
        return run_all(args, settings, broker)
    raise AssertionError("unreachable")  # pragma: no cover


def run_all(args: argparse.Namespace, settings: Settings, broker: RestartableBroker | None) -> int:
    results = []
    print(
        f"{'backend':<16} {'seed':>4} {'commit point':<17} {'kills':>5} {'retries':>7} {'dup':>6} {'s':>6} "
        f"{'restart':>7}  problems"
    )
    for backend in args.backend or sorted(COMMIT_POINTS):
        for seed in range(args.seed, args.seed + args.runs):
            with tempfile.TemporaryDirectory(prefix="millstream-soak-") as directory:
                result = run_once(backend, seed, settings, Path(directory), broker)
            results.append(result)
            stall = "-" if result.restart_stall is None else f"{result.restart_stall:.1f}"
            print(
                f"{result.backend:<16} {result.seed:>4} {result.commit_point:<17} {result.kills:>5} "
                f"{result.retries:>7} {result.duplicates:>6.3f} {result.seconds:>6.1f} {stall:>7}  "
                f"{'; '.join(result.problems) or 'none'}",
                flush=True,
            )
    return 1 if any(result.problems for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
