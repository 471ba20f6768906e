"""Commit CPU and start-up time against the number of tasks, each with a RocksDB store and its changelog.

    python -m benchmarks.commit_scale [--tasks 1,10,100,1000] [--rounds 3] [--system log|kafka] [--stateless]
                                      [--repeats 1] [--calls] [--root DIR] [--local-checkpoint-ms MS]
                                      [--committing K]
    valgrind --tool=callgrind --instr-atstart=no python -m benchmarks.commit_scale --instructions [...]

One container runs ``N`` tasks (one input partition each) of a job whose store ``counts`` is backed up to a
changelog (``--stateless``: tasks without stores, whose commits only flush and checkpoint); the container is the
real one (``Container``) in this process, with its run loop replaced by the measurement. Reported per ``N``:

* **start-up**: wall seconds and process CPU seconds from ``Container.run`` to its tasks being started
  (fence, admins and producers, checkpoints read, stores opened and restored — empty here —, tasks
  initialised, consumers started);
* **commit round**: wall seconds and process CPU seconds (``time.process_time``, every thread of the process,
  the commit threads included) of one full round — every task processed one message, which writes one key, then
  every task commits (flush, snapshot, checkpoint) and the round waits for the commits to end; the median of
  the rounds after the first (the first alone when ``--rounds 1``);
* **first round**: the CPU seconds of the first full round, whose stores also make their local checkpoint (see
  below): every round is such a round when commits are further apart than the local checkpoint interval, as
  at-least-once's 60 s commits are; the median of the later rounds mixed the two kinds before it was split out;
* **checkpoint batches**: how many batches the container's group commit wrote the checkpoints of a full round
  in (``CheckpointGroupCommit.batches``; the median of the rounds);
* **collections**: the garbage collector's CPU per round and its longest collection over the rounds after the
  first (``benchmarks.gc_pauses``), which the medians leave out: a round with a full collection is rarely the median;
* **idle round**: the same, straight after a full round, when no task processed anything since its last commit
  (issue 36 asks 1,000 tasks for under 100 ms: nothing to flush, snapshot or checkpoint); the median of
  ``--rounds`` rounds;

``--committing K`` has only the first K tasks of each container process and commit in a round, the others idle in
it: with ``--tasks 100,1000 --committing 100`` the two rows commit the same 100 tasks, one in a container ten times
the size, which tells a commit that costs more in a bigger container from rounds that cost more for touching more
tasks (the per-task column is per committing task).

The store makes its local checkpoint (memtable flush, RocksDB checkpoint directory) at the first round, then every
``stores.counts.local.checkpoint.interval.ms`` (10 s by default, so the later rounds of a run do not);
``--local-checkpoint-ms 0`` makes one at every round, as every commit did before that setting.

Each figure comes with the ratio of its CPU seconds to the 100-task row's (issue 40 asks 1,000 tasks for under 10x the
cost of 100; CPU, as wall time on a shared machine moves with its load). ``--calls`` also counts the Python calls of
start-up, of a full commit round (the median) and of the first one, which also deletes what earlier attempts left
(``benchmarks.call_count``: every thread, at about twice the CPU): a measure of work that a busy machine does not
move, as CPU seconds do by a third and more between runs of the same code; it does not see work inside RocksDB and
SQLite. ``--instructions``, with the benchmark run under valgrind's callgrind, also counts the instructions of
start-up and of a full commit round after the first (the median), every thread's and native code's included
(``benchmarks.instructions``): work that neither the machine's load nor its caches move, where CPU seconds count each
instruction at what its memory accesses cost (callgrind runs the process about 50 times slower, so its CPU and wall
figures mean nothing then). ``--repeats R`` measures every task count R times, the counts in turn, and shows each
figure's median. Input and changelog live in the embedded log (``--system log``) or in a Kafka broker the benchmark
starts (``--system kafka``: ``tests.integration.kafka_broker``, ``make kafka-jars``), where checkpoints go to Kafka as
well. The figures are process-local, so they move with the machine; the ratios are what to compare."""

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

from benchmarks.call_count import CallCounter
from benchmarks.gc_pauses import CollectionPauses
from benchmarks.instructions import RUN_UNDER, InstructionCounter
from millstream.api.task import InitableTask, StreamTask
from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.prepare import prepare
from millstream.model import IncomingMessageEnvelope
from millstream.runtime.container import Container
from millstream.runtime.run_loop import RunLoop
from millstream.runtime.task_instance import TaskInstance

BASELINE = 100
"""The row every ratio is taken against."""

ONE_LOCAL_CHECKPOINT_MS = 3_600_000
"""The stores' local checkpoint interval unless ``--local-checkpoint-ms`` gives one: the first round makes the
local checkpoints, the later rounds none, however long a round lasts. With the stores' default of 10 s, a round of
1,000 tasks on Kafka (4 to 5 s on a 2-core machine shared with its broker), or any round under callgrind, let the
interval pass within every second later round at 1,000 tasks and never at 100, so the median of the later rounds
mixed the two kinds of round at one count and not at the other."""


class Ignore(StreamTask):
    """Processes each message by doing nothing: its commits have offsets to checkpoint and nothing else."""

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        pass


class PutEachMessage(StreamTask, InitableTask):
    """Writes each message's key into the ``counts`` store: one changelog record per message."""

    def init(self, context: Any) -> None:
        self.store = context.get_store("counts")

    def process(self, envelope: Any, collector: Any, coordinator: Any) -> None:
        self.store.put(envelope.key, envelope.message)


@dataclass
class Measured:
    tasks: int
    startup_seconds: float
    startup_cpu: float
    commit_cpu: float
    """Median CPU seconds of one full commit round after the first (the first alone when there is one round)."""
    commit_seconds: float
    """Median wall seconds of one full commit round after the first (the first alone when there is one round)."""
    idle_cpu: float
    """Median CPU seconds of one commit round in which no task changed."""
    idle_seconds: float
    """Median wall seconds of one commit round in which no task changed."""
    batches: float | None = None
    """Median batches the checkpoints of a full round were written in (None: no group commit to ask)."""
    startup_calls: float | None = None
    """Python calls of start-up (``--calls``; None: not counted)."""
    commit_calls: float | None = None
    """Median Python calls of one full commit round (``--calls``; None: not counted)."""
    first_commit_calls: float | None = None
    """Python calls of the first full commit round, which also deletes what earlier attempts left (``--calls``)."""
    startup_instructions: float | None = None
    """Instructions of start-up, every thread's (``--instructions``; None: not counted)."""
    commit_instructions: float | None = None
    """Median instructions of one full commit round after the first (``--instructions``)."""
    first_commit_cpu: float | None = None
    """CPU seconds of the first full round, whose stores also make their local checkpoint (a memtable flush and a
    RocksDB checkpoint directory each): what every commit does when commits are further apart than
    ``stores.<s>.local.checkpoint.interval.ms``, as at-least-once's 60 s are."""
    committing: int | None = None
    """Tasks that processed and committed in each round (``--committing``; None: all of them)."""
    collection_cpu: float | None = None
    """CPU seconds of the garbage collector's collections per round after the first (processing, commit and idle
    round), averaged over those rounds: where the medians above leave out the rare round with a full collection."""
    longest_collection: float | None = None
    """CPU seconds of the longest collection in the rounds after the first: a pause of every Python thread."""


class MeasuringContainer(Container):
    """The real container, whose run loop is replaced by the measurement; it then stops (and commits)."""

    def __init__(
        self,
        *args: Any,
        rounds: int,
        counter: CallCounter | None = None,
        instructions: InstructionCounter | None = None,
        committing: int | None = None,
        **kwargs: Any,
    ) -> None:
        self._stop_now = threading.Event()
        self.committing = committing
        self.counter = counter
        self.instructions = instructions
        self.began_calls = counter.calls() if counter is not None else 0
        super().__init__(*args, stop_event=self._stop_now, **kwargs)
        self.rounds = rounds
        self.startup_window = contextlib.ExitStack()
        """Counts start-up's instructions (``--instructions``) until the run loop begins."""
        self.startup_counted = (
            self.startup_window.enter_context(instructions.window("start-up")) if instructions is not None else None
        )
        self.commit_instructions: list[int] = []
        self.began = (time.perf_counter(), time.process_time())
        self.startup = (0.0, 0.0)
        self.startup_calls: int | None = None
        self.commit_calls: list[int] = []
        self.commit_cpu: list[float] = []
        self.commit_wall: list[float] = []
        self.idle_cpu: list[float] = []
        self.idle_wall: list[float] = []
        self.batches: list[int] = []
        self.pauses = CollectionPauses()

    def _run_loop(self, loop: RunLoop, every_task: list[TaskInstance]) -> None:
        tasks = every_task[: self.committing]
        wall, cpu = self.began
        self.startup = (time.perf_counter() - wall, time.process_time() - cpu)
        self.startup_window.close()
        counter = self.counter
        if counter is not None:
            self.startup_calls = counter.calls() - self.began_calls
        for offset in range(self.rounds):
            if offset == 1:
                self.pauses.start()
            for task in tasks:
                (ssp,) = task.ssps
                key = f"{task.task_name}/{offset}".encode()
                task.process(ssp, [IncomingMessageEnvelope(ssp, str(offset), key, b"v" * 16)])
            batches = _checkpoint_batches(tasks)
            calls = counter.calls() if counter is not None else 0
            counting = self.instructions if offset > 0 else None  # the first round also makes a local checkpoint
            with counting.window(f"round-{offset}") if counting else contextlib.nullcontext() as window:
                wall, cpu = _commit_round(tasks)
            if window is not None:
                self.commit_instructions.append(window.instructions)
            if counter is not None:
                self.commit_calls.append(counter.calls() - calls)
            self.commit_wall.append(wall)
            self.commit_cpu.append(cpu)
            if batches is not None:
                self.batches.append((_checkpoint_batches(tasks) or 0) - batches)
            wall, cpu = _commit_round(tasks)  # nothing processed since: an idle round
            self.idle_wall.append(wall)
            self.idle_cpu.append(cpu)
        self.pauses.stop()
        self._stop_now.set()
        super()._run_loop(loop, every_task)


def _checkpoint_batches(tasks: list[TaskInstance]) -> int | None:
    """The batches the container's checkpoint writer wrote so far, where it counts them (a group commit)."""
    batches = getattr(tasks[0].committer.checkpoint_manager, "batches", None) if tasks else None
    return batches if isinstance(batches, int) else None


def _commit_round(tasks: list[TaskInstance]) -> tuple[float, float]:
    """Wall and CPU seconds of every task's commit, until the commits in flight ended."""
    wall, cpu = time.perf_counter(), time.process_time()
    for task in tasks:
        task.commit()
    for task in tasks:
        task.committer.wait_for_commit()
    return time.perf_counter() - wall, time.process_time() - cpu


def job_config(
    root: Path,
    tasks: int,
    system: str,
    bootstrap: str | None,
    stateless: bool = False,
    local_checkpoint_ms: int | None = None,
) -> Settings:
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
    if local_checkpoint_ms is not None:
        values["stores.counts.local.checkpoint.interval.ms"] = local_checkpoint_ms
    if stateless:
        values["task.class"] = f"{__name__}:Ignore"
        values = {key: value for key, value in values.items() if not key.startswith("stores.")}
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
    return prepare(Settings(values))


def measure(
    root: Path,
    tasks: int,
    rounds: int,
    system: str,
    bootstrap: str | None,
    stateless: bool = False,
    calls: bool = False,
    local_checkpoint_ms: int | None = ONE_LOCAL_CHECKPOINT_MS,
    instructions: InstructionCounter | None = None,
    committing: int | None = None,
) -> Measured:
    """One container of ``tasks`` tasks; ``committing``: only that many of them process and commit in a round."""
    config = job_config(root, tasks, system, bootstrap, stateless, local_checkpoint_ms)
    admin = system_factory(config, system).get_admin(system, config)
    admin.start()
    try:
        admin.create_stream(StreamSpec(system, config.get_list("task.inputs")[0].split(".", 1)[1], tasks))
    finally:
        admin.stop()
    os.sync()  # earlier runs' files written out first: their writeback slowed this run's file creation by 2x
    store = metadata_store(config)
    try:
        model = JobCoordinator(config, store).start()
        with CallCounter() if calls else contextlib.nullcontext() as counter:
            container = MeasuringContainer(
                config,
                model,
                "0",
                rounds=rounds,
                store=store,
                counter=counter,
                instructions=instructions,
                committing=committing,
            )
            result = container.run()
    finally:
        store.close()
    if result.outcome not in ("stopped", "finished"):
        raise RuntimeError(f"{tasks} tasks: the container ended {result.outcome}")
    active = min(committing or tasks, tasks)
    if result.commits < active * rounds:
        raise RuntimeError(f"{tasks} tasks: {result.commits} commits wrote a checkpoint, not {active * rounds}")
    wall, cpu = container.startup
    median = statistics.median
    later_cpu, later_wall = (
        container.commit_cpu[1:] or container.commit_cpu,
        container.commit_wall[1:] or container.commit_wall,
    )
    return Measured(
        tasks,
        wall,
        cpu,
        median(later_cpu),
        median(later_wall),
        median(container.idle_cpu),
        median(container.idle_wall),
        median(container.batches) if container.batches else None,
        container.startup_calls,
        median(container.commit_calls) if container.commit_calls else None,
        container.commit_calls[0] if container.commit_calls else None,
        container.startup_counted.instructions if container.startup_counted is not None else None,
        median(container.commit_instructions) if container.commit_instructions else None,
        container.commit_cpu[0],
        committing,
        container.pauses.cpu / (rounds - 1) if rounds > 1 else None,
        container.pauses.longest if rounds > 1 else None,
    )


def median_of(runs: list[Measured]) -> Measured:
    """Each figure's median over repeated measurements of one task count (``--repeats``). The counts are
    measured in turn, repeat after repeat, so a busy spell of a shared machine weighs on every count alike: one
    measurement of a count moved by more than a third between runs on a loaded machine."""
    if len(runs) == 1:
        return runs[0]
    figures = ("startup_seconds", "startup_cpu", "commit_cpu", "commit_seconds", "idle_cpu", "idle_seconds")
    medians: dict[str, Any] = {figure: statistics.median(getattr(run, figure) for run in runs) for figure in figures}
    for optional in (
        "batches",
        "startup_calls",
        "commit_calls",
        "first_commit_calls",
        "startup_instructions",
        "commit_instructions",
        "first_commit_cpu",
        "committing",
        "collection_cpu",
        "longest_collection",
    ):
        known = [getattr(run, optional) for run in runs if getattr(run, optional) is not None]
        medians[optional] = statistics.median(known) if known else None
    return Measured(runs[0].tasks, **medians)


def table(rows: list[Measured]) -> str:
    base = next((row for row in rows if row.tasks == BASELINE), None)

    def ratio(value: float, of: float | None) -> str:
        return f"{value / of:.2f}x" if of else "-"

    lines = [
        "| tasks | start-up s | start-up CPU s | CPU vs 100 | commit round s | commit round CPU s | per task ms "
        "| CPU vs 100 | idle round s | idle round CPU s | idle CPU vs 100 | checkpoint batches "
        "| first round CPU s | first round CPU vs 100 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.tasks:,} | {row.startup_seconds:.3f} | {row.startup_cpu:.3f} | "
            f"{ratio(row.startup_cpu, base.startup_cpu if base else None)} | {row.commit_seconds:.4f} | "
            f"{row.commit_cpu:.4f} | {row.commit_cpu / min(row.committing or row.tasks, row.tasks) * 1000:.2f} | "
            f"{ratio(row.commit_cpu, base.commit_cpu if base else None)} | {row.idle_seconds:.4f} | "
            f"{row.idle_cpu:.4f} | {ratio(row.idle_cpu, base.idle_cpu if base else None)} | "
            f"{'-' if row.batches is None else f'{row.batches:g}'} | "
            f"{'-' if row.first_commit_cpu is None else f'{row.first_commit_cpu:.4f}'} | "
            f"{_ratio(row.first_commit_cpu, base.first_commit_cpu if base else None)} |"
        )
    if any(row.collection_cpu is not None for row in rows):
        lines += ["", collections_table(rows)]
    if any(row.startup_calls is not None for row in rows):
        lines += ["", calls_table(rows, base)]
    if any(row.startup_instructions is not None for row in rows):
        lines += ["", instructions_table(rows, base)]
    return "\n".join(lines)


def _ratio(value: float | None, of: float | None) -> str:
    return f"{value / of:.2f}x" if value is not None and of else "-"


def _per_task(value: float | None, tasks: int) -> str:
    return "-" if value is None else f"{value / tasks:,.0f}"


def collections_table(rows: list[Measured]) -> str:
    """The garbage collector's CPU per round and its longest pause, in the rounds after the first."""
    lines = [
        "| tasks | collections CPU per round s | vs commit round CPU | longest collection ms |",
        "|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row.collection_cpu is None or row.longest_collection is None:
            continue
        lines.append(
            f"| {row.tasks:,} | {row.collection_cpu:.4f} | {row.collection_cpu / row.commit_cpu:.1%} | "
            f"{row.longest_collection * 1000:.1f} |"
        )
    return "\n".join(lines)


def calls_table(rows: list[Measured], base: Measured | None) -> str:
    """Python calls of start-up and of a full commit round, per task and against the 100-task row (``--calls``)."""

    lines = [
        "| tasks | start-up calls per task | start-up calls vs 100 | commit round calls per task "
        "| commit calls vs 100 | first round calls per task | first round calls vs 100 |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.tasks:,} | {_per_task(row.startup_calls, row.tasks)} | "
            f"{_ratio(row.startup_calls, base.startup_calls if base else None)} | "
            f"{_per_task(row.commit_calls, row.tasks)} | "
            f"{_ratio(row.commit_calls, base.commit_calls if base else None)} | "
            f"{_per_task(row.first_commit_calls, row.tasks)} | "
            f"{_ratio(row.first_commit_calls, base.first_commit_calls if base else None)} |"
        )
    return "\n".join(lines)


def instructions_table(rows: list[Measured], base: Measured | None) -> str:
    """Instructions of start-up and of a full commit round, per task and against the 100-task row
    (``--instructions``)."""

    lines = [
        "| tasks | start-up instructions per task | start-up instructions vs 100 "
        "| commit round instructions per task | commit instructions vs 100 |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.tasks:,} | {_per_task(row.startup_instructions, row.tasks)} | "
            f"{_ratio(row.startup_instructions, base.startup_instructions if base else None)} | "
            f"{_per_task(row.commit_instructions, row.tasks)} | "
            f"{_ratio(row.commit_instructions, base.commit_instructions if base else None)} |"
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
    parser.add_argument("--stateless", action="store_true", help="tasks without stores")
    parser.add_argument(
        "--repeats", type=int, default=1, help="measure every task count this many times, interleaved (medians shown)"
    )
    parser.add_argument("--calls", action="store_true", help="also count Python calls (about twice the CPU)")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help=f"also count instructions, native code's too (run under callgrind: {RUN_UNDER})",
    )
    parser.add_argument(
        "--local-checkpoint-ms",
        type=int,
        default=ONE_LOCAL_CHECKPOINT_MS,
        help="stores.counts.local.checkpoint.interval.ms (0: at every commit; default: once, in the first round)",
    )
    parser.add_argument(
        "--committing",
        type=int,
        help="only this many tasks of each container process and commit in a round, the others idle in it: whether "
        "a task's commit costs more in a bigger container or only when more tasks commit",
    )
    parser.add_argument(
        "--root", type=Path, help="where the runs' files go (default: the temporary directory; /dev/shm: a tmpfs)"
    )
    args = parser.parse_args()
    counts = [int(count) for count in args.tasks.split(",")]
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-commit-scale-", dir=args.root))
    runs: dict[int, list[Measured]] = {tasks: [] for tasks in counts}
    instructions = InstructionCounter() if args.instructions else None
    local_checkpoint_ms = args.local_checkpoint_ms
    try:
        with system_for(args.system, root) as bootstrap:
            for repeat in range(args.repeats):
                for tasks in counts:
                    where = root / f"{tasks}-{repeat}"
                    runs[tasks].append(
                        measure(
                            where,
                            tasks,
                            args.rounds,
                            args.system,
                            bootstrap,
                            args.stateless,
                            args.calls,
                            local_checkpoint_ms,
                            instructions,
                            args.committing,
                        )
                    )
                    print(f"{tasks} tasks done", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if instructions is not None:
            instructions.close()
    stores = "no stores" if args.stateless else "RocksDB store + changelog per task"
    if local_checkpoint_ms is not None and not args.stateless:
        stores += f", a local checkpoint every {local_checkpoint_ms} ms"
    print(
        f"\nsystem: {args.system}, {stores}, {args.rounds} commit rounds (median), "
        f"{args.repeats} interleaved repeat(s) per task count (medians)\n"
    )
    print(table([median_of(measured) for measured in runs.values()]))


if __name__ == "__main__":
    main()
