"""Watermark-to-output latency: how long after the watermark passes a window's end its output is readable.

    python -m benchmarks.latency_window [--rate 1000] [--seconds 20] [--window-ms 1000] [--partitions 4]
                                        [--users 100] [--runner in-process --runner spark] [--set key=value ...]
                                        [--compare-boundaries]
                                        [--out benchmarks/results/latency_window.json]

A high-level application (``WindowCounts``) reads ``log.win-in`` (JSON records ``{"ts": <ms>, "user": ...}``, event
time = ``ts``), repartitions by user (``partition_by``, an intermediate stream of the embedded log) and counts each
user's records in tumbling windows of ``--window-ms``, sending each pane to ``log.win-out``. This process writes
``--rate`` records/s with ``ts`` = the wall clock at the write (out-of-orderness 0), from before the job starts until
``--seconds`` after the first pane was read, so the watermark passes a window's end when the first record at or
after that end is written: at the end itself, within a record's interval.
A reader on ``log.win-out`` takes every pane as the log makes it readable; latency = the time the reader got it -
the window's end. Each runner runs the job alone (``millstream run``, ``--in-process`` or through the Spark runner in
local mode, 1 container) on fresh streams; the input is sealed at the end so the job finishes. Panes of windows
ending before two windows after the first pane was read (start-up, catching up) and those the final end-of-stream
flushes are not measured.

What the latency is made of (docs/performance.md): the source task emits a watermark that passes a window's end
at once (``app.watermark.window.boundaries``; without it, at its timer: ``app.watermark.interval.ms``, and the
``partition_by`` paces it by ``app.control.watermark.interval.ms``), the ``partition_by`` sends it to every
intermediate partition (visible after the log producer's ``producer.linger.ms``), the downstream task reads it
(the run loop polls without waiting while records flow) and fires the window at once, and the pane's output waits
the producer's linger again.

``--compare-boundaries`` runs every runner twice in one run, with ``app.watermark.window.boundaries=false`` (the
watermarks on their timers, as before issue 31) and ``true`` (the default), and prints the ratios.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from millstream import (
    InputDescriptor,
    OutgoingMessageEnvelope,
    OutputDescriptor,
    StreamApplication,
    StreamApplicationDescriptor,
    SystemStream,
    TumblingWindow,
    WindowPane,
)
from millstream.api.windows import Count
from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec

REPO = Path(__file__).resolve().parents[1]
SOURCE = SystemStream("log", "win-in")
SINK = SystemStream("log", "win-out")
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0))
SKIPPED_WINDOWS = 2


class WindowCounts(StreamApplication):
    """Records per user per tumbling window of ``bench.window.ms``, after a ``partition_by`` by user."""

    def describe(self, app: StreamApplicationDescriptor) -> None:
        size = int(app.config.get("bench.window.ms", "1000"))

        def pane(window: WindowPane) -> dict[str, Any]:
            return {"user": window.key, "start": window.start, "end": window.start + size, "count": window.value}

        records = app.input(InputDescriptor("log.win-in", msg_serde="json", timestamp=lambda record: record["ts"]))
        (
            records.partition_by(lambda record: record["user"], name="by-user")
            .window(TumblingWindow(size), key=lambda kv: kv.key, aggregate=Count(), name="per-window")
            .map(pane)
            .send_to(OutputDescriptor("log.win-out", msg_serde="json"))
        )


def job_config(workdir: Path, args: argparse.Namespace) -> dict[str, Any]:
    values: dict[str, Any] = {
        "job.name": "latency-window",
        "job.data.dir": str(workdir / "data"),
        "job.container.count": 1,
        "systems.log.path": str(workdir / "log"),
        "systems.log.samza.offset.default": "oldest",
        "app.class": "benchmarks.latency_window:WindowCounts",
        "app.intermediate.partitions": args.partitions,
        "bench.window.ms": args.window_ms,
    }
    for setting in args.set or []:
        key, _, value = setting.partition("=")
        values[key.strip()] = value.strip()
    return values


class PaneReader(threading.Thread):
    """Reads every pane of ``log.win-out`` as the log makes it readable: ``(read time ms, pane)``."""

    def __init__(self, config: Config, partitions: int) -> None:
        super().__init__(daemon=True, name="pane-reader")
        self.consumer = system_factory(config, "log").get_consumer("log", config)
        self.ssps = {SINK.partition(p) for p in range(partitions)}
        for ssp in self.ssps:
            self.consumer.register(ssp, "0")
        self.panes: list[tuple[float, dict[str, Any]]] = []
        self.first_read: float | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        self.consumer.start()
        try:
            while not self.stopping.is_set():
                for envelopes in self.consumer.poll(self.ssps, 0.005).values():
                    now = time.time() * 1000
                    if envelopes and self.first_read is None:
                        self.first_read = now
                    for envelope in envelopes:
                        if envelope.message is not None and not envelope.is_end_of_stream:
                            self.panes.append((now, json.loads(envelope.message)))
        finally:
            self.consumer.stop()


def write_paced(
    config: Config, args: argparse.Namespace, process: subprocess.Popen[bytes], reader: PaneReader
) -> float:
    """``--rate`` records/s, ``ts`` = now, until ``--seconds`` after the first pane was read (the job is up: a
    Spark job starts in tens of seconds); returns the wall-clock ms the writes ended."""
    producer = system_factory(config, "log").get_producer("log", config)
    producer.start()
    try:
        started, written = time.monotonic(), 0
        total = int(args.rate * (args.startup_timeout + args.seconds))
        while written < total:
            if process.poll() is not None:
                raise RuntimeError(f"the job exited ({process.returncode}) while records were written")
            if reader.first_read is not None and time.time() * 1000 - reader.first_read > args.seconds * 1000:
                break
            due = min(total, int((time.monotonic() - started) * args.rate) + 1)
            while written < due:
                record = {"ts": int(time.time() * 1000), "user": f"user-{written % args.users}"}
                envelope = OutgoingMessageEnvelope(SOURCE, json.dumps(record).encode(), None, partition=written % 4)
                producer.send("bench", envelope)
                written += 1
            producer.flush("bench")
            time.sleep(max(0.0, started + written / args.rate - time.monotonic()))
        return time.time() * 1000
    finally:
        producer.stop()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


def measure(runner: str, args: argparse.Namespace, root: Path, boundaries: bool | None = None) -> dict[str, Any]:
    """One job on fresh streams; ``boundaries`` (unless None) sets ``app.watermark.window.boundaries``."""
    label = runner if boundaries is None else f"{runner}/{'boundaries' if boundaries else 'timer'}"
    workdir = root / label.replace("/", "-")
    values = job_config(workdir, args)
    if boundaries is not None:
        values["app.watermark.window.boundaries"] = str(boundaries).lower()
    config = Settings(values)
    admin = system_factory(config, "log").get_admin("log", config)
    admin.start()
    admin.create_stream(StreamSpec("log", SOURCE.stream, 4))
    admin.create_stream(StreamSpec("log", SINK.stream, args.partitions))
    properties = workdir / "job.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    command = [sys.executable, "-c", "from millstream.cli.main import main; main()", "run", str(properties), "-q"]
    command += ["--in-process"] if runner == "in-process" else []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    log = (args.logs / f"{label.replace('/', '-')}.log").open("wb")
    reader = PaneReader(config, args.partitions)
    reader.start()
    started = time.time() * 1000
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ended = write_paced(config, args, process, reader)
        admin.seal_stream(SOURCE.stream)
        process.wait(args.deadline)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
        reader.stopping.set()
        reader.join(30)
        admin.stop()
        log.close()
    if process.returncode != 0:
        raise RuntimeError(f"{label}: the job failed ({process.returncode}); see {log.name}")
    first_read = reader.first_read or started  # the job is up and caught up
    first_end = (math.floor(first_read / args.window_ms) + SKIPPED_WINDOWS) * args.window_ms
    latencies = [now - pane["end"] for now, pane in reader.panes if first_end <= pane["end"] <= ended]
    stats = {label: percentile(latencies, q) for label, q in PERCENTILES}
    print(
        f"  {label:<22} {len(latencies):,} panes: " + "  ".join(f"{k} {v:,.1f} ms" for k, v in stats.items()),
        flush=True,
    )
    overrides = args.set or []
    return {
        "runner": runner,
        "boundaries": boundaries,
        "panes": len(latencies),
        "latency_ms": stats,
        "overrides": overrides,
        "log": log.name,
    }


def print_ratios(results: list[dict[str, Any]]) -> None:
    """Per runner: the timer-paced latency over the boundary one, per percentile (how many times faster)."""
    for runner in dict.fromkeys(result["runner"] for result in results):
        pair = {result["boundaries"]: result["latency_ms"] for result in results if result["runner"] == runner}
        if False in pair and True in pair:
            ratios = {label: pair[False][label] / pair[True][label] for label, _ in PERCENTILES if pair[True][label]}
            print(f"  {runner:<11} timer / boundaries: " + "  ".join(f"{k} {v:.1f}x" for k, v in ratios.items()))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency_window", description=__doc__)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--window-ms", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4, help="intermediate and output partitions")
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--runner", action="append", choices=["in-process", "spark"], help="repeatable; default both")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="config overrides, repeatable")
    parser.add_argument(
        "--compare-boundaries",
        action="store_true",
        help="run each runner with app.watermark.window.boundaries false, then true, and print the ratios",
    )
    parser.add_argument("--deadline", type=float, default=180.0, help="seconds for the job to end after the seal")
    parser.add_argument("--startup-timeout", type=float, default=240.0, help="seconds to the first pane")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "latency_window.json")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="millstream-latency-window-"))
    args.logs = Path(tempfile.mkdtemp(prefix="millstream-latency-window-logs-"))
    print(f"jobs' logs in {args.logs}", flush=True)
    print(
        f"{args.rate:,} records/s for {args.seconds:g} s, windows of {args.window_ms} ms, {args.partitions} "
        f"intermediate partitions, {args.users} users; overrides: {' '.join(args.set or []) or 'none'}",
        flush=True,
    )
    try:
        variants: list[bool | None] = [False, True] if args.compare_boundaries else [None]
        runners = args.runner or ["in-process", "spark"]
        results = [measure(runner, args, root, boundaries) for runner in runners for boundaries in variants]
        print_ratios(results)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    args.out.write_text(json.dumps({"args": settings, "results": results}, indent=1))
    print(f"written {args.out}", flush=True)


if __name__ == "__main__":
    main()
