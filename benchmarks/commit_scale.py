"""Commit CPU and start-up time against the number of tasks, each with a RocksDB store and its changelog.

    python -m benchmarks.commit_scale [--tasks 1,10,100,1000] [--rounds 3] [--system log|kafka] [--repeats 1]

One container runs ``N`` tasks (one input partition each) of a job whose store ``counts`` is backed up to a
changelog; the container is the real one (``Container``) in this process, with its run loop replaced by the
measurement. Reported per ``N``:

* **start-up**: wall seconds and process CPU seconds from ``Container.run`` to its tasks being started
  (fence, admins and producers, checkpoints read, stores opened and restored — empty here —, tasks
  initialised, consumers started);
* **commit round**: process CPU seconds (``time.process_time``, every thread of the process, the commit
  threads included) of one full round — every task processed one message, which writes one key, then every
  task commits (flush, snapshot, checkpoint) and the round waits for the commits to end; the median of
  ``--rounds`` rounds;

each with the ratio of its CPU seconds to the 100-task row's (issue 40 asks 1,000 tasks for under 10x the cost of
100; CPU, as wall time on a shared machine moves with its load), with and without the CPU of librdkafka's own
threads, which poll the brokers on timers and so follow how long a phase lasts rather than its work.
``--repeats R`` measures every task count R times, the counts in turn, and shows the medians: on a shared
machine one measurement of a count moves by more than a third between runs. Input
and changelog live in the embedded log (``--system log``) or in a Kafka broker the benchmark starts
(``--system kafka``: ``tests.integration.kafka_broker``, ``make kafka-jars``), where checkpoints go to Kafka as
well. The figures are process-local, so they move with the machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from millstream.api.task import InitableTask, StreamTask
from millstream.config import Config
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.prepare import prepare
from millstream.metadata.opening import metadata_store
from millstream.model import IncomingMessageEnvelope
from millstream.runtime.container import Container
from millstream.runtime.run_loop import RunLoop
from millstream.runtime.task_instance import TaskInstance
from millstream.systems.base import StreamSpec
from millstream.systems.registry import system_factory

BASELINE = 100
"""The row every ratio is taken against."""


class PutEachMessage(StreamTask, InitableTask):
    """Writes each message's key into the ``counts`` store: one changelog record per message."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.store.put(envelope.key, envelope.message)


CLIENT_THREADS = "rdk:"
"""librdkafka names its threads ``rdk:main``, ``rdk:broker<n>``, ...: the Kafka clients' own work."""


def client_thread_cpu() -> float:
    """CPU seconds so far of this process's live librdkafka threads (``/proc/self/task``). They poll the
    brokers on timers of their own, so their CPU follows the wall time a phase lasts as much as its work; it
    is shown apart, so the ratios can be read without it. (Threads that ended took their CPU with them: the
    process's Kafka clients live from start-up to the end of the run.)"""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                if not comm.read().startswith(CLIENT_THREADS):
                    continue
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
    return total / ticks


def cpu_now() -> tuple[float, float]:
    """The process's CPU seconds and its Kafka client threads' share of them."""
    return (time.process_time(), client_thread_cpu())


@dataclass
class Measured:
    tasks: int
    startup_seconds: float
    startup_cpu: float
    startup_client_cpu: float
    """Of ``startup_cpu``, the Kafka client threads' (0 on the embedded log)."""
    commit_cpu: float
    """Median CPU seconds of one full commit round."""
    commit_client_cpu: float
    """Of ``commit_cpu``, the Kafka client threads' (the same round's)."""


class MeasuringContainer(Container):
    """The real container, whose run loop is replaced by the measurement; it then stops (and commits)."""

    def __init__(self, *args: Any, rounds: int, **kwargs: Any) -> None:
        self._stop_now = threading.Event()
        super().__init__(*args, stop_event=self._stop_now, **kwargs)
        self.rounds = rounds
        self.began = (time.perf_counter(), *cpu_now())
        self.startup = (0.0, 0.0, 0.0)
        self.commit_cpu: list[tuple[float, float]] = []

    def _run_loop(self, loop: RunLoop, tasks: list[TaskInstance]) -> None:
        wall, cpu, client = self.began
        cpu_then, client_then = cpu_now()
        self.startup = (time.perf_counter() - wall, cpu_then - cpu, client_then - client)
        for offset in range(self.rounds):
            for task in tasks:
                (ssp,) = task.ssps
                key = f"{task.task_name}/{offset}".encode()
                task.process(ssp, [IncomingMessageEnvelope(ssp, str(offset), key, b"v" * 16)])
            cpu, client = cpu_now()
            for task in tasks:
                task.commit()
            for task in tasks:
                task.finish_commits()  # waits for the commit in flight (a no-op commit follows)
            cpu_then, client_then = cpu_now()
            self.commit_cpu.append((cpu_then - cpu, client_then - client))
        self._stop_now.set()
        super()._run_loop(loop, tasks)


def job_config(root: Path, tasks: int, system: str, bootstrap: str | None) -> Config:
    """Names are unique per call: on a broker, streams outlive a measurement."""
    run = f"{tasks}-{int(time.time() * 1000)}"
    values: dict[str, Any] = {
        "job.name": f"bench-commit-scale-{run}",
        "job.data.dir": str(root / "data"),
        "job.container.count": 1,
        "task.class": f"{__name__}:PutEachMessage",
        "task.inputs": f"{system}.bench-in-{run}",
        "task.commit.ms": 3_600_000,
        "stores.counts.factory": "rocksdb",
        "stores.counts.changelog": f"{system}.bench-counts-{run}",
        "stores.counts.key.serde": "bytes",
        "stores.counts.msg.serde": "bytes",
        "serializers.registry.bytes.class": "bytes",
        f"systems.{system}.samza.offset.default": "oldest",
    }
    if system == "log":
        values["systems.log.path"] = str(root / "log")
    else:
        values.update(
            {
                "task.checkpoint.factory": "kafka",
                "systems.kafka.samza.factory": "kafka",
                "systems.kafka.bootstrap.servers": bootstrap,
            }
        )
    return prepare(Config(values))


def measure(root: Path, tasks: int, rounds: int, system: str, bootstrap: str | None) -> Measured:
    config = job_config(root, tasks, system, bootstrap)
    admin = system_factory(config, system).get_admin(system, config)
    admin.start()
    try:
        admin.create_stream(StreamSpec(system, config.get_list("task.inputs")[0].split(".", 1)[1], tasks))
    finally:
        admin.stop()
    store = metadata_store(config)
    try:
        model = JobCoordinator(config, store).start()
        container = MeasuringContainer(config, model, "0", rounds=rounds, store=store)
        result = container.run()
    finally:
        store.close()
    if result.outcome not in ("stopped", "finished"):
        raise RuntimeError(f"{tasks} tasks: the container ended {result.outcome}")
    if result.commits < tasks * rounds:
        raise RuntimeError(f"{tasks} tasks: {result.commits} commits wrote a checkpoint, not {tasks * rounds}")
    wall, cpu, client = container.startup
    rounds_by_cpu = sorted(container.commit_cpu)
    commit_cpu, commit_client = rounds_by_cpu[len(rounds_by_cpu) // 2]  # the median round, with its own share
    return Measured(tasks, wall, cpu, client, commit_cpu, commit_client)


def median_of(runs: list[Measured]) -> Measured:
    """Each figure's median over repeated measurements of one task count. The task counts are measured in
    turn, repeat after repeat, so a busy spell of a shared machine weighs on every count alike."""

    def median(figure: str) -> float:
        return statistics.median(getattr(run, figure) for run in runs)

    figures = ("startup_seconds", "startup_cpu", "startup_client_cpu", "commit_cpu", "commit_client_cpu")
    return Measured(runs[0].tasks, *(median(figure) for figure in figures))


def table(rows: list[Measured]) -> str:
    base = next((row for row in rows if row.tasks == BASELINE), None)

    def ratio(value: float, of: float | None) -> str:
        return f"{value / of:.2f}x" if of else "-"

    lines = [
        "| tasks | start-up s | start-up CPU s | CPU vs 100 | without clients vs 100 | commit round CPU s "
        "| per task ms | CPU vs 100 | without clients vs 100 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        own_startup, own_commit = row.startup_cpu - row.startup_client_cpu, row.commit_cpu - row.commit_client_cpu
        lines.append(
            f"| {row.tasks:,} | {row.startup_seconds:.3f} | {row.startup_cpu:.3f} | "
            f"{ratio(row.startup_cpu, base.startup_cpu if base else None)} | "
            f"{ratio(own_startup, base.startup_cpu - base.startup_client_cpu if base else None)} | "
            f"{row.commit_cpu:.4f} | {row.commit_cpu / row.tasks * 1000:.2f} | "
            f"{ratio(row.commit_cpu, base.commit_cpu if base else None)} | "
            f"{ratio(own_commit, base.commit_cpu - base.commit_client_cpu if base else None)} |"
        )
    return "\n".join(lines)


@contextlib.contextmanager
def system_for(system: str, root: Path) -> Iterator[str | None]:
    """The bootstrap servers of a broker started for the run (Kafka), or None (the embedded log)."""
    if system == "log":
        yield None
        return
    from tests.integration.kafka_broker import KafkaBroker

    with KafkaBroker(root / "broker", log_level="WARN") as broker:
        yield broker.bootstrap_servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", default="1,10,100,1000", help="comma-separated task counts")
    parser.add_argument("--rounds", type=int, default=3, help="commit rounds per task count (the median is shown)")
    parser.add_argument("--system", choices=["log", "kafka"], default="log")
    parser.add_argument(
        "--repeats", type=int, default=1, help="measure every task count this many times, interleaved (medians shown)"
    )
    args = parser.parse_args()
    counts = [int(count) for count in args.tasks.split(",")]
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-commit-scale-"))
    runs: dict[int, list[Measured]] = {tasks: [] for tasks in counts}
    try:
        with system_for(args.system, root) as bootstrap:
            for repeat in range(args.repeats):
                for tasks in counts:
                    runs[tasks].append(measure(root / f"{tasks}-{repeat}", tasks, args.rounds, args.system, bootstrap))
                    print(f"{tasks} tasks done", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"\nsystem: {args.system}, RocksDB store + changelog per task, {args.rounds} commit rounds (median), "
        f"{args.repeats} interleaved repeat(s) per task count (median)\n"
    )
    print(table([median_of(measured) for measured in runs.values()]))


if __name__ == "__main__":
    main()
