"""How millstream's costs grow with the size of a job, as ratios, in one run (issue 36).

    python -m benchmarks.scale [--fanout 4,32,128] [--messages 200000] [--watermark-interval-ms 200]
                               [--fanout-runner in-process|spark]
                               [--partitions 4,64,256]
                               [--passthrough-messages 100000] [--idle] [--tasks 1,10,100,1000]
                               [--task-rounds 3] [--task-repeats 1] [--task-systems log,kafka]
                               [--keys 1000000] [--value-size 100]
                               [--restore-runs 3] [--random-order] [--plot PATH.png]
    python -m benchmarks.scale --replot PATH.json

Four curves, each relative to its smallest point, on the embedded log and the in-process runner
(2 containers; an empty list, ``--fanout ""``, or ``--keys 0`` leaves a curve out):

  control fan-out   P source partitions -> partition_by into Q = P partitions -> 1 s tumbling count,
                    ``--messages`` messages whose event time moves 1 ms per message. For each P: the job
                    with watermarks suppressed (``app.control.watermark.interval.ms`` one hour: one
                    watermark and end-of-stream per producer, the baseline "without event time"), with
                    broadcast watermarks — on their timers only (``timer``:
                    ``app.watermark.window.boundaries=false``, as before issue 31) and, the default, also
                    at once when they pass a window's end (``broadcast``) — and with
                    ``app.control.aggregation`` (``aggregated-timer``: on the timers only); control records per user
                    record written to the intermediate stream and per watermark interval while event time moved
                    (from the first source message to the last), wall time against the baseline, and how
                    long after the last source message the last sink task saw end-of-stream (its final windows
                    fired and their output sent: the moment its end was handled, before its final commit), and
                    from the last user record a downstream task read until then (the control path alone), and
                    the job's end (the run returned: every final commit made) after the last source message.
                    ``--fanout-runner spark`` runs these jobs through Spark's local mode instead (the seconds
                    then include each run's Spark job, not the session's start).
  partitions        a low-level pass-through (a no-op task) of ``--passthrough-messages`` spread over P
                    partitions: wall time of the run and CPU per message (the process's CPU time over the
                    run, start-up included, divided by the messages), against the smallest P; start-up (from
                    the run's start to the first message processed, planning included) and the CPU per
                    message from the first message on (the steady cost); and, with ``--idle``, the
                    container's memory per idle partition: the RSS of a process running the job over P
                    empty partitions once every task has had a window call, less that at the smallest P,
                    per partition added.
  tasks             ``benchmarks.commit_scale``'s measurement, imported (one container of N tasks, each with a
                    RocksDB store and its changelog on the embedded log, and with ``--task-systems log,kafka``
                    also on a Kafka broker started for it, checkpoints in Kafka): start-up and the CPU of a full
                    and of an idle commit round; ``--task-repeats`` interleaved measurements per count, medians.
  restore vs disk   for each count of ``--keys`` (a list: a curve over the store's size), one RocksDB
                    store of that many keys: restore from its changelog and from the blob store after
                    the files were evicted from the page cache, against the disk's sequential read speed
                    (the changelog's own files read back after eviction); by wall time and by the
                    process's CPU time (a restore is CPU-bound: on a machine whose cores
                    are shared, MB per CPU second is what an idle core would give). Each is the median of
                    ``--restore-runs`` runs: on a shared machine one read of the disk varies several-fold.
                    The keys are written in key order, or shuffled with ``--random-order`` (as a real
                    changelog holds them: RocksDB's own cost of taking them is then several times higher).
                    Beside them, RocksDB's own fill of the same keys, natively, with the options the replay
                    opens the store with (``benchmarks.engine_fill``: ``db_bench``, ``make db-bench``), and
                    the replay's time against it: the engine's ceiling for any replay on this machine.

``--plot PATH`` writes the run's figures to ``PATH`` with the suffix ``.json`` after each curve (an interrupted
run keeps what it measured) and, at the end, draws every curve as ratios into the PNG ``PATH``
(``benchmarks/scale_plot.py``; matplotlib, the ``bench`` extra). ``--replot JSON`` redraws the PNG beside an
earlier run's JSON and measures nothing.

Figures come from one run on a shared machine: compare rows with each other, not with other machines.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import commit_scale, scale_apps, scale_plot
from benchmarks.engine_fill import DbBenchMissingError, Fill, engine_fill
from benchmarks.state_common import KEY_SIZE, StateJob, bench_config, fill_store
from millstream import InitableTask, Job, StreamTask, WindowableTask
from millstream.checkpoint.checkpoint import CheckpointV2
from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.config.views import StoreConfig
from millstream.contracts.systems import StreamSpec
from millstream.control.framing import MessageType
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, iter_stream, write_stream

SOURCE = SystemStream("log", "scale-in")
FANOUT_MODES = scale_plot.FANOUT_MODES
STATS = re.compile(r"(\d+) user message\(s\) written; control messages (\d+) sent")


class ControlCounts(logging.Handler):
    """Adds up what every task logs at close about its intermediate streams (``ControlStats``): counting
    the records in the streams afterwards would miss what the consuming stage already purged."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.user = self.control = 0

    def emit(self, record: logging.LogRecord) -> None:
        found = STATS.search(record.getMessage())
        if found:
            self.user += int(found[1])
            self.control += int(found[2])

    def __enter__(self) -> ControlCounts:
        logger = logging.getLogger("millstream.operators.graph_task")
        logger.addHandler(self)
        logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("millstream.operators.graph_task").removeHandler(self)


def create_input(cfg: Settings, partitions: int, messages: int, event_time: bool) -> None:
    admin = system_factory(cfg, "log").get_admin("log", cfg)
    admin.create_stream(StreamSpec("log", SOURCE.stream, partitions))
    for partition in range(partitions):
        pairs = [
            (None, {"user": f"u{n % 997}", "ts": n} if event_time else {"n": n})
            for n in range(partition, messages, partitions)
        ]
        write_stream(cfg, SOURCE, pairs, partition=partition)
    admin.seal_stream(SOURCE.stream)


@dataclass
class FanOut:
    seconds: float
    user: int
    control: int
    end_latency: float
    """From the last source message to the last sink task's end-of-stream."""
    control_latency: float
    """From the last user record read downstream to the last sink task's end-of-stream."""
    job_end: float
    """From the last source message to the job's end (the run returned: every task's final commit made, the
    containers shut down): what the end-of-stream figures do not include."""
    event_seconds: float
    """From the first source message to the last: while event time moves, watermarks go out every interval."""

    def per_interval(self, interval_ms: int) -> float:
        """Control records per watermark interval while event time moved (end-of-stream's once-per-run records
        included, so an upper bound)."""
        return self.control / max(self.event_seconds * 1000 / interval_ms, 1.0)


def fan_out_run(
    root: Path, partitions: int, messages: int, mode: str, interval_ms: int = 200, runner: str = "in-process"
) -> FanOut:
    """One run of the fan-out job in ``mode``, in process or through Spark (``runner="spark"``: local mode, a
    task slot per container and one spare; the figures then come from the Python workers' notes and the
    intermediate stream's records, which this run keeps instead of deleting them once committed)."""
    run = f"fanout-{partitions}-{mode}"
    spark = runner == "spark"
    notes_dir = root / run / "notes"
    values: dict[str, Any] = {
        "job.name": run,
        "job.data.dir": str(root / run),
        "job.container.count": 2,
        "app.class": "benchmarks.scale_apps:WindowedCount",
        "app.intermediate.partitions": partitions,
        "app.control.aggregation": str(mode.startswith("aggregated")).lower(),
        "app.control.watermark.interval.ms": 3_600_000 if mode == "baseline" else interval_ms,
        "app.watermark.window.boundaries": str(mode not in ("baseline", "timer", "aggregated-timer")).lower(),
        "systems.log.samza.offset.default": "oldest",
        "task.commit.ms": 10_000,
        "bench.run": run,
    }
    if spark:
        values["bench.notes.dir"] = str(notes_dir)
        values[f"systems.log.streams.{intermediate_stream(run).stream}.samza.delete.committed.messages"] = "false"
    cfg = prepare(Settings(values))
    create_input(cfg, partitions, messages, event_time=True)
    with ControlCounts() as counts:
        started = time.perf_counter()
        result = Job(cfg).run(runner="spark", master="local[3]") if spark else InProcessRunner(cfg).run(timeout=900)
        seconds = time.perf_counter() - started
        returned = time.time()
    assert result.outcome == "finished", f"{run}: {result.outcome} {result.error}"
    user, control = counts.user, counts.control
    if spark:
        scale_apps.read_notes(run, notes_dir)
        user, control = intermediate_records(cfg, run)
    ended = max(scale_apps.SINK_ENDS.get(run, [float("nan")]))
    nan = float("nan")
    return FanOut(
        seconds,
        user,
        control,
        ended - scale_apps.LAST_SOURCE.get(run, nan),
        ended - scale_apps.LAST_READ.get(run, nan),
        returned - scale_apps.LAST_SOURCE.get(run, nan),
        scale_apps.LAST_SOURCE.get(run, nan) - scale_apps.FIRST_SOURCE.get(run, nan),
    )


def intermediate_stream(run: str) -> SystemStream:
    """The fan-out job's intermediate stream (``<app.name>-<app.id>-by-user``)."""
    return SystemStream("log", f"{run}-1-by-user")


def intermediate_records(cfg: Settings, run: str) -> tuple[int, int]:
    """User and control records in the run's intermediate stream, by their frames' type byte (kept: see
    ``fan_out_run``)."""
    user = control = 0
    for _, envelopes in iter_stream(cfg, intermediate_stream(run), idle_timeout=5.0):
        for envelope in envelopes:
            if envelope.message[0] == MessageType.USER_MESSAGE:
                user += 1
            else:
                control += 1
    return user, control


def fan_out(
    root: Path, sizes: list[int], messages: int, interval_ms: int = 200, runner: str = "in-process"
) -> list[dict[str, Any]]:
    print(
        f"\ncontrol fan-out: P x P partitions, {messages:,} messages, 2 containers, "
        f"watermark interval {interval_ms} ms, runner {runner}"
    )
    print(
        f"{'P x Q':>10}{'mode':>17}{'seconds':>9}{'x baseline':>11}{'ctl records':>13}{'ctl/user':>10}"
        f"{'per interval':>13}{'EOS lag s':>10}{'after read':>11}{'job end s':>10}"
    )
    rows: list[dict[str, Any]] = []
    if runner == "spark":  # the Spark session starts here, not in the first row's time
        fan_out_run(root, 2, 100, "baseline", interval_ms, runner)
    for size in sizes:
        baseline = None
        for mode in FANOUT_MODES:
            row = fan_out_run(root, size, messages, mode, interval_ms, runner)
            rows.append({"size": size, "mode": mode, **asdict(row), "per_interval": row.per_interval(interval_ms)})
            baseline = baseline or row.seconds
            print(
                f"{f'{size}x{size}':>10}{mode:>17}{row.seconds:>9.1f}{row.seconds / baseline:>11.2f}"
                f"{row.control:>13,}{row.control / max(row.user, 1):>10.4f}{row.per_interval(interval_ms):>13.1f}"
                f"{row.end_latency:>10.2f}"
                f"{row.control_latency:>11.2f}"
                f"{row.job_end:>10.2f}"
            )
    return rows


FIRST_MESSAGE: dict[str, tuple[float, float]] = {}
"""Per run: the wall clock and the process's CPU time when its first message was processed."""
LAST_MESSAGE: dict[str, tuple[float, float]] = {}
"""Per run: the same when its last message (``bench.messages``) was processed."""
PROCESSED = itertools.count(1)
"""Messages processed by ``TimedNoOp`` tasks of this process (``next`` is atomic: the containers are threads)."""
WINDOWED: set[str] = set()
"""Tasks (of any run) that had their first window call: their container's loop is running."""


def tasks_module() -> Any:
    """This module as the runner loads ``task.class`` from (under ``python -m`` it is not ``__main__``)."""
    return importlib.import_module("benchmarks.scale")


class TimedNoOp(StreamTask, InitableTask, WindowableTask):
    """Reads and does nothing, but notes when the first message of its run (``bench.run``) was processed."""

    def init(self, context):
        self.run = context.config.get("bench.run", "")
        self.last = int(context.config.get("bench.messages", "0"))
        self.name = str(context.task_name)
        self.first = True

    def process(self, envelope, collector, coordinator):
        if self.first:
            self.first = False
            FIRST_MESSAGE.setdefault(self.run, (time.perf_counter(), time.process_time()))
        if next(PROCESSED) == self.last:
            LAST_MESSAGE[self.run] = (time.perf_counter(), time.process_time())

    def window(self, collector, coordinator):
        WINDOWED.add(self.name)


def passthrough_config(root: Path, run: str, **extra: object) -> Settings:
    return prepare(
        Settings(
            {
                "job.name": run,
                "job.data.dir": str(root / run),
                "job.container.count": 2,
                "task.class": "benchmarks.scale:TimedNoOp",
                "task.inputs": f"log.{SOURCE.stream}",
                "systems.log.samza.offset.default": "oldest",
                "systems.log.samza.msg.serde": "json",
                "bench.run": run,
                **extra,
            }
        )
    )


@dataclass
class PassThrough:
    seconds: float
    cpu_per_message: float
    startup: float
    """From the run's start to its first message processed."""
    steady_cpu_per_message: float
    """The process's CPU time from the first message to the last one processed, per message."""
    end_cpu: float
    """The process's CPU seconds after the last message: the final commits and the shutdown."""


def passthrough_run(root: Path, partitions: int, messages: int) -> PassThrough:
    run = f"passthrough-{partitions}"
    cfg = passthrough_config(root, run, **{"bench.messages": messages})
    create_input(cfg, partitions, messages, event_time=False)
    tasks_module().PROCESSED = itertools.count(1)
    started, cpu = time.perf_counter(), time.process_time()
    result = InProcessRunner(cfg).run(timeout=900)
    seconds, ended_cpu = time.perf_counter() - started, time.process_time()
    assert result.outcome == "finished", f"{run}: {result.outcome} {result.error}"
    first, first_cpu = tasks_module().FIRST_MESSAGE[run]
    _, last_cpu = tasks_module().LAST_MESSAGE[run]
    # the containers are threads of this process: its CPU is theirs
    return PassThrough(
        seconds, (ended_cpu - cpu) / messages, first - started, (last_cpu - first_cpu) / messages, ended_cpu - last_cpu
    )


def idle_rss(root: Path, partitions: int) -> int:
    """The RSS of this process (bytes) running the pass-through over ``partitions`` empty, open partitions, once
    every task had a window call (its container's loop polls them)."""
    run = f"idle-{partitions}"
    cfg = passthrough_config(root, run, **{"task.window.ms": 50})
    admin = system_factory(cfg, "log").get_admin("log", cfg)
    admin.create_stream(StreamSpec("log", SOURCE.stream, partitions))
    runner = InProcessRunner(cfg)
    tasks_module().WINDOWED.clear()
    thread = threading.Thread(target=runner.run, kwargs={"timeout": 600})
    thread.start()
    try:
        while len(tasks_module().WINDOWED) < partitions and thread.is_alive():
            time.sleep(0.1)
        time.sleep(1.0)  # a few more polls over every partition
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    finally:
        runner.request_stop()
        thread.join()


def idle_rss_in_child(partitions: int) -> int:
    """``idle_rss`` in a process of its own, so that no earlier run's heap is in the figure."""
    code = (
        "import sys, tempfile, pathlib; from benchmarks import scale; "
        "print(scale.idle_rss(pathlib.Path(tempfile.mkdtemp(prefix='millstream-bench-idle-')), int(sys.argv[1])))"
    )
    output = subprocess.run([sys.executable, "-c", code, str(partitions)], check=True, capture_output=True, text=True)
    return int(output.stdout.split()[-1])


def partitions_curve(root: Path, sizes: list[int], messages: int, idle: bool) -> list[dict[str, Any]]:
    print(f"\npartitions: pass-through of {messages:,} messages, 2 containers")
    print(
        f"{'P':>8}{'run s':>9}{'x':>7}{'µs/msg':>9}{'x':>7}{'start-up s':>12}{'steady µs/msg':>15}{'x':>7}"
        f"{'end CPU s':>11}" + (f"{'RSS MB':>9}{'KB/partition':>14}" if idle else "")
    )
    first: PassThrough | None = None
    first_rss = 0
    rows: list[dict[str, Any]] = []
    for size in sizes:
        row = passthrough_run(root, size, messages)
        rows.append({"partitions": size, **asdict(row), "rss": None})
        first = first or row
        line = (
            f"{size:>8}{row.seconds:>9.1f}{row.seconds / first.seconds:>7.2f}{row.cpu_per_message * 1e6:>9.1f}"
            f"{row.cpu_per_message / first.cpu_per_message:>7.2f}{row.startup:>12.2f}"
            f"{row.steady_cpu_per_message * 1e6:>15.1f}"
            f"{row.steady_cpu_per_message / first.steady_cpu_per_message:>7.2f}"
            f"{row.end_cpu:>11.2f}"
        )
        if idle:
            rss = idle_rss_in_child(size)
            rows[-1]["rss"] = rss
            first_rss = first_rss or rss
            per_partition = (rss - first_rss) / (size - sizes[0]) / 1024 if size != sizes[0] else 0.0
            line += f"{rss / 1e6:>9.0f}{per_partition:>14.1f}"
        print(line)
    return rows


def files_under(directory: Path) -> Iterator[Path]:
    return (path for path in directory.rglob("*") if path.is_file())


def evict(directory: Path) -> None:
    """Drop ``directory``'s files from the page cache (written back first), so the next read is the disk's."""
    for path in files_under(directory):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def sequential_read(directory: Path) -> tuple[int, float]:
    """Bytes of ``directory``'s files and the seconds reading them once, in 1 MiB reads, took."""
    total, started = 0, time.perf_counter()
    for path in files_under(directory):
        with path.open("rb", buffering=0) as file:
            while chunk := file.read(1 << 20):
                total += len(chunk)
    return total, time.perf_counter() - started


def restore_curve(root: Path, keys: int, value_size: int, runs: int = 3, random_order: bool = False) -> dict[str, Any]:
    """Each restore, and the disk's sequential read, ``runs`` times after evicting the files; the medians (the
    row ``scale_plot`` reads: bytes, the disk's seconds, and each source's wall and CPU seconds)."""
    config = bench_config(root / "restore")
    job = StateJob(config)
    state, _ = job.open(None)
    fill_store(state, keys, value_size, random_order=random_order)
    state.producers.flush("Partition 0")
    checkpoint = job.commit(state, keys)
    state.close()
    log_dir = Path(config["systems.log.path"])
    reads = []
    for _ in range(runs):
        evict(log_dir)
        size, seconds = sequential_read(log_dir)
        reads.append(seconds)
    seconds = statistics.median(reads)
    disk = size / seconds
    print(
        f"\nrestore vs disk: {keys:,} keys of {value_size} B written in {'random' if random_order else 'key'} order; "
        f"the embedded log's files: {size / 1e6:,.0f} MB; medians of {runs} runs"
    )
    print(f"{'read':<32}{'seconds':>9}{'MB/s':>9}{'x disk':>8}{'CPU s':>8}{'MB/CPU s':>10}{'x disk':>8}")
    print(f"{'disk, sequential (evicted)':<32}{seconds:>9.2f}{disk / 1e6:>9.0f}{1:>8.2f}")
    row: dict[str, Any] = {"keys": keys, "value_size": value_size, "bytes": size, "disk_seconds": seconds}
    for source in scale_plot.SOURCES:
        hosts = [root / f"host-{source}-{run}" for run in range(runs)]
        timings = [restore_once(job, checkpoint, config, host, source, keys) for host in hosts]
        took = statistics.median(t[0] for t in timings)
        cpu = statistics.median(t[1] for t in timings)
        rate, cpu_rate = size / took, size / cpu
        row[source] = {"seconds": took, "cpu": cpu}
        print(
            f"{'restore from the ' + source:<32}{took:>9.2f}{rate / 1e6:>9.0f}{rate / disk:>8.2f}"
            f"{cpu:>8.2f}{cpu_rate / 1e6:>10.0f}{cpu_rate / disk:>8.2f}"
        )
    if (engine := engine_row(root, config, keys, value_size, runs, random_order)) is not None:
        row["engine"] = engine
        took, cpu = engine["seconds"], engine["cpu"]
        print(
            f"{ENGINE_LABEL:<32}{took:>9.2f}{size / took / 1e6:>9.0f}{size / took / disk:>8.2f}"
            f"{cpu:>8.2f}{size / cpu / 1e6:>10.0f}{size / cpu / disk:>8.2f}"
        )
        print(
            f"the changelog restore against the engine's own fill: {took / row['changelog']['seconds']:.2f} by wall "
            f"time, {cpu / row['changelog']['cpu']:.2f} by CPU time"
        )
    return row


ENGINE_LABEL = "RocksDB's own fill (db_bench)"


def engine_row(
    root: Path, config: Settings, keys: int, value_size: int, runs: int, random_order: bool
) -> dict[str, float] | None:
    """RocksDB's own fill of the same keys, natively (``benchmarks.engine_fill``), with the options the store's replay
    takes: the medians of ``runs`` fills' wall and CPU seconds; None, said, when this machine has no ``db_bench``."""
    store = config.view(StoreConfig, "counts")
    fill = Fill(
        keys=keys,
        key_size=KEY_SIZE,
        value_size=value_size,
        random_order=random_order,
        write_buffer_size=store.container_write_buffer_size_bytes,
        write_buffers=store.rocksdb_num_write_buffers,
        batch=int(config["systems.log.producer.batch.size"]),
    )
    try:
        timings = [engine_fill(fill, root / "engine-fill") for _ in range(runs)]
    except DbBenchMissingError as missing:
        print(f"{ENGINE_LABEL}: not measured ({missing})")
        return None
    return {"seconds": statistics.median(t[0] for t in timings), "cpu": statistics.median(t[1] for t in timings)}


def restore_once(
    job: StateJob, checkpoint: CheckpointV2, config: Settings, host: Path, source: str, keys: int
) -> tuple[float, float]:
    """Restore ``checkpoint`` from ``source`` on a new host (``host``) after evicting the job's files: the wall
    seconds and the process's CPU seconds it took. The store must then hold its ``keys`` keys (counted untimed)."""
    evict(Path(config["job.data.dir"]).parent)
    cpu = time.process_time()
    restored, took = job.open(
        checkpoint,
        config.with_overrides(
            {
                "stores.restore.factories": source,
                "job.logged.store.base.dir": str(host / "logged"),
                "job.non-logged.store.base.dir": str(host / "non-logged"),
            }
        ),
    )
    cpu = time.process_time() - cpu
    held = sum(1 for _ in restored.storage.stores["counts"].all())
    restored.close()
    shutil.rmtree(host, ignore_errors=True)
    if held != keys:
        raise RuntimeError(f"the restore from the {source} holds {held:,} keys, not {keys:,}")
    return took, cpu


def tasks_curve(root: Path, counts: list[int], rounds: int, repeats: int, system: str = "log") -> list[dict[str, Any]]:
    """``benchmarks.commit_scale``'s measurement (one container of N tasks, a RocksDB store and its changelog
    each, on the embedded log or a Kafka broker started for it) for each count, ``repeats`` times interleaved;
    each figure's median per count."""
    print(
        f"\ntasks ({system}): commit rounds and start-up, one container, a store + changelog per task, {rounds} rounds"
    )
    runs: dict[int, list[commit_scale.Measured]] = {count: [] for count in counts}
    with commit_scale.system_for(system, root / f"tasks-{system}") as bootstrap:
        for repeat in range(repeats):
            for count in counts:
                where = root / f"tasks-{system}-{count}-{repeat}"
                runs[count].append(commit_scale.measure(where, count, rounds, system, bootstrap))
    rows = [commit_scale.median_of(measured) for measured in runs.values()]
    print(commit_scale.table(rows))
    return [asdict(row) for row in rows]


def load_average() -> float:
    return os.getloadavg()[0]


def run_curves(args: argparse.Namespace, root: Path, save: Callable[[dict[str, Any]], None]) -> None:
    """Every curve asked for, in turn; ``save`` gets the figures so far after each curve (an interrupted run
    still leaves what it measured), with the 1-minute load average noted before and after each."""
    document: dict[str, Any] = {"title": TITLE, "load": [["start", load_average()]]}
    curves: list[tuple[str, Callable[[], Any]]] = [
        ("fanout", lambda: fan_out(root, args.fanout, args.messages, args.watermark_interval_ms, args.fanout_runner)),
        ("partitions", lambda: partitions_curve(root, args.partitions, args.passthrough_messages, args.idle)),
        ("tasks", lambda: tasks_curve(root, args.tasks, args.task_rounds, args.task_repeats)),
        ("tasks_kafka", lambda: tasks_curve(root, args.tasks, args.task_rounds, args.task_repeats, "kafka")),
        (
            "restore",
            lambda: [
                restore_curve(root / f"keys-{keys}", keys, args.value_size, args.restore_runs, args.random_order)
                for keys in args.keys
            ],
        ),
    ]
    asked = {
        "fanout": args.fanout,
        "partitions": args.partitions,
        "tasks": args.tasks if "log" in args.task_systems else [],
        "tasks_kafka": args.tasks if "kafka" in args.task_systems else [],
        "restore": args.keys,
    }
    for name, curve in curves:
        if asked[name]:
            document[name] = curve()
            document["load"].append([name, load_average()])
            save(document)


TITLE = "benchmarks.scale: growth as ratios to each curve's smallest point (embedded log unless it says Kafka, one run)"


def sizes(text: str) -> list[int]:
    """A comma-separated list of sizes; empty, or 0, leaves the curve out (``--keys 0`` as before it was a list)."""
    return [size for size in (int(part) for part in text.split(",") if part) if size > 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--fanout", type=sizes, default=[4, 32, 128])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--watermark-interval-ms", type=int, default=200, help="the fan-out's app.control.watermark.interval.ms"
    )
    parser.add_argument(
        "--fanout-runner",
        choices=("in-process", "spark"),
        default="in-process",
        help="run the fan-out jobs in this process or through Spark (local mode, a slot per container and one spare)",
    )
    parser.add_argument("--partitions", type=sizes, default=[4, 64, 256])
    parser.add_argument("--passthrough-messages", type=int, default=100_000)
    parser.add_argument("--idle", action="store_true", help="also measure the memory per idle partition")
    parser.add_argument("--tasks", type=sizes, default=[1, 10, 100, 1000], help="task counts of the commit curve")
    parser.add_argument("--task-rounds", type=int, default=3, help="commit rounds per task count (median)")
    parser.add_argument("--task-repeats", type=int, default=1, help="measure each task count this many times")
    parser.add_argument(
        "--task-systems",
        type=lambda text: [part for part in text.split(",") if part],
        default=["log"],
        help="where the tasks curve runs: log, kafka (a broker started for it: make kafka-jars) or both",
    )
    parser.add_argument("--keys", type=sizes, default=[1_000_000], help="key counts of the restore curve")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--restore-runs", type=int, default=3)
    parser.add_argument("--random-order", action="store_true", help="write the restored store's keys shuffled")
    parser.add_argument("--plot", type=Path, help="draw the run's curves into this PNG, its figures beside it as JSON")
    parser.add_argument("--replot", type=Path, help="redraw the PNG beside this JSON of an earlier run; run nothing")
    args = parser.parse_args()
    if args.replot:
        scale_plot.plot(scale_plot.read_json(args.replot), args.replot.with_suffix(".png"))
        print(f"written {args.replot.with_suffix('.png')}")
        return
    plot_to: Path | None = args.plot

    def save(document: dict[str, Any]) -> None:
        if plot_to is not None:
            scale_plot.write_json(document, plot_to.with_suffix(".json"))

    root = Path(tempfile.mkdtemp(prefix="millstream-bench-scale-"))
    try:
        run_curves(args, root, save)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if plot_to is not None:
        scale_plot.plot(scale_plot.read_json(plot_to.with_suffix(".json")), plot_to)
        print(f"\nwritten {plot_to} and {plot_to.with_suffix('.json')}")


if __name__ == "__main__":
    main()
