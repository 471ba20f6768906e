"""A job over thousands of embedded-log partitions with an output stream as wide (issue 36 item 3).

    python -m benchmarks.log_wide [--partitions 4096,10000] [--messages 100000] [--containers 1]
                                  [--idle 4,1024,10000] [--set systems.log.consumer.open.partitions.max=64]

``--partitions``: for each P, a low-level task copies every message of a P-partition input to the same
partition of a P-partition output stream (one task per partition, in-process runner); the input is sealed, so
the job ends. Printed: start-up (from the run's start to the first message processed), the run's wall time, the
process's peak RSS, and whether the output is exact: every input partition's values, in order, in its output
partition, none missing, none twice. ``ulimit -n`` (soft and hard) is printed first.

``--idle``: for each P, the RSS of a fresh process running the same job over P empty partitions (with the output
stream as wide) once every task had a window call, and the memory per idle partition against the smallest P.

Figures come from one run on a shared machine: compare rows with each other, not with other machines.
"""

from __future__ import annotations

import argparse
import importlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from millstream import InitableTask, StreamTask, WindowableTask
from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.prepare import prepare
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.storage import LogPartition
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.testing import InProcessRunner

INPUT = SystemStream("log", "wide-in")
OUTPUT = SystemStream("log", "wide-out")
FIRST: dict[str, float] = {}
WINDOWED: set[str] = set()


class WideCopy(StreamTask, InitableTask, WindowableTask):
    """Copies each message to the same partition of ``wide-out``; notes when its run's first message came."""

    def init(self, context):
        self.run = context.config.get("bench.run", "")
        self.name = str(context.task_name)

    def process(self, envelope, collector, coordinator):
        FIRST.setdefault(self.run, time.perf_counter())
        collector.send(OutgoingMessageEnvelope(OUTPUT, envelope.message, partition=envelope.ssp.partition))

    def window(self, collector, coordinator):
        WINDOWED.add(self.name)


def this_module() -> Any:
    """This module as the runner loads ``task.class`` from (under ``python -m`` it is not ``__main__``)."""
    return importlib.import_module("benchmarks.log_wide")


def wide_config(root: Path, run: str, containers: int, extra: dict[str, str]) -> Config:
    values: dict[str, object] = {
        "job.name": run,
        "job.data.dir": str(root / run),
        "job.container.count": containers,
        "task.class": "benchmarks.log_wide:WideCopy",
        "task.inputs": f"log.{INPUT.stream}",
        "task.commit.ms": 60_000,
        "systems.log.samza.offset.default": "oldest",
        "bench.run": run,
    }
    values.update(extra)
    return prepare(Settings(values))


def create_streams(cfg: Config, partitions: int, messages: int, seal: bool = True) -> list[list[bytes]]:
    """Both streams, the input filled (each partition written through a file of its own, opened and closed in
    turn) and sealed unless not ``seal``; the values written, per partition."""
    admin = system_factory(cfg, "log").get_admin("log", cfg)
    admin.start()
    try:
        admin.create_stream(StreamSpec("log", INPUT.stream, partitions))
        admin.create_stream(StreamSpec("log", OUTPUT.stream, partitions))
        layout = LogLayout(Path(cfg["job.data.dir"]) / "log", "log")
        written: list[list[bytes]] = []
        for partition in range(partitions):
            values = [b"%d" % n for n in range(partition, messages, partitions)]
            written.append(values)
            if values:
                log = LogPartition(layout.partition_path(INPUT.stream, partition), INPUT.stream, partition)
                try:
                    log.append_columns([0] * len(values), None, values, None)
                finally:
                    log.close()
        if seal:
            admin.seal_stream(INPUT.stream)
    finally:
        admin.stop()
    return written


def output_exact(cfg: Config, written: list[list[bytes]]) -> bool:
    layout = LogLayout(Path(cfg["job.data.dir"]) / "log", "log")
    for partition, values in enumerate(written):
        log = LogPartition(layout.partition_path(OUTPUT.stream, partition), OUTPUT.stream, partition)
        try:
            records = log.read(0, len(values) + 1)
        finally:
            log.close()
        if (records.values if records is not None else []) != values:
            return False
    return True


def wide_run(root: Path, partitions: int, messages: int, containers: int, extra: dict[str, str]) -> None:
    run = f"wide-{partitions}"
    cfg = wide_config(root, run, containers, extra)
    written = create_streams(cfg, partitions, messages)
    started = time.perf_counter()
    result = InProcessRunner(cfg).run(timeout=1800)
    seconds = time.perf_counter() - started
    first = this_module().FIRST.get(run)
    startup = f"{first - started:.1f}" if first is not None else "-"
    exact = result.outcome == "finished" and output_exact(cfg, written)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{partitions:>8}{startup:>12}{seconds:>9.1f}{rss:>12.0f}   {result.outcome}, exact output: {exact}")
    if result.outcome != "finished":
        print(f"          {result.error}")


def idle_rss(root: Path, partitions: int, extra: dict[str, str]) -> int:
    """The RSS of this process (bytes) running the copy job over ``partitions`` empty partitions, once every task
    had a window call (its container's loop polls them)."""
    run = f"idle-{partitions}"
    cfg = wide_config(root, run, 1, {"task.window.ms": "50", **extra})
    create_streams(cfg, partitions, 0, seal=False)
    runner = InProcessRunner(cfg)
    thread = threading.Thread(target=runner.run, kwargs={"timeout": 1800})
    thread.start()
    try:
        while len(this_module().WINDOWED) < partitions and thread.is_alive():
            time.sleep(0.1)
        time.sleep(2.0)  # a few more polls over every partition, and time for quiet ones to close
        if not thread.is_alive() or len(this_module().WINDOWED) < partitions:
            raise RuntimeError(f"{run}: the job ended or not every task ran ({len(this_module().WINDOWED)})")
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    finally:
        runner.request_stop()
        thread.join()


def idle_rss_in_child(partitions: int, extra: dict[str, str]) -> int:
    code = (
        "import sys, tempfile, pathlib; from benchmarks import log_wide; "
        "extra = dict(arg.split('=', 1) for arg in sys.argv[2:]); "
        "root = pathlib.Path(tempfile.mkdtemp(prefix='millstream-bench-wide-idle-')); "
        "print(log_wide.idle_rss(root, int(sys.argv[1]), extra))"
    )
    arguments = [f"{key}={value}" for key, value in extra.items()]
    output = subprocess.run(
        [sys.executable, "-c", code, str(partitions), *arguments], check=True, capture_output=True, text=True
    )
    return int(output.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--partitions", type=lambda text: [int(part) for part in text.split(",") if part], default=[])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--containers", type=int, default=1)
    parser.add_argument("--idle", type=lambda text: [int(part) for part in text.split(",") if part], default=[])
    parser.add_argument("--set", action="append", default=[], help="a config key=value for the job")
    args = parser.parse_args()
    extra = dict(item.split("=", 1) for item in args.set)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"ulimit -n: soft {soft}, hard {hard}")
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-wide-"))
    try:
        if args.partitions:
            print(f"\ncopy of {args.messages:,} messages into an output stream as wide, {args.containers} container(s)")
            print(f"{'P':>8}{'start-up s':>12}{'run s':>9}{'peak RSS MB':>12}")
            for partitions in args.partitions:
                wide_run(root, partitions, args.messages, args.containers, extra)
        if args.idle:
            print("\nidle partitions (and an output stream as wide), 1 container")
            print(f"{'P':>8}{'RSS MB':>9}{'KB/partition':>14}")
            first = 0
            for partitions in args.idle:
                rss = idle_rss_in_child(partitions, extra)
                first = first or rss
                per = (rss - first) / (partitions - args.idle[0]) / 1024 if partitions != args.idle[0] else 0.0
                print(f"{partitions:>8}{rss / 1e6:>9.0f}{per:>14.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
