"""End-to-end latency over the embedded log: a fixed-rate writer, each contender consume → produce, a reader.

    python -m benchmarks.latency_log [--rate 1000] [--seconds 20] [--warmup 5] [--partitions 4] [--keys 1000]
                                     [--workload w1 --workload w2] [--contender raw-log --contender millstream ...]
                                     [--set key=value ...] [--out benchmarks/results/latency_log.json]

The embedded log's counterpart of ``benchmarks.latency`` (same workloads, values and figures). This process
appends ``--rate`` records/s to ``log.lat-in`` through the log's producer (flushed every record interval), records
``b"<seq>,<send time ns>,<padding>"`` keyed ``key-<seq % keys>`` to partition ``(seq % keys) % partitions``; a
reader thread takes ``log.lat-out`` through the log's consumer; latency = the time the reader got a record - its
send time. Contenders, each alone, in turn, on fresh streams:
  raw-log             the log's consumer → the log's producer in a subprocess, every polled batch flushed at once
                      (``benchmarks.latency_tasks raw-log``); W2 counts in a dict
  millstream          ``millstream run --in-process``, the job's default config (W2: RocksDB + a log changelog)
  millstream-tuned    the same with the ``--set`` overrides (default: a commit every 10 s)
  millstream-spark    ``millstream run`` through the Spark runner, local mode, 1 container, default config
The writer waits until the contender's output has a record (probes at 10/s), then writes ``--warmup`` seconds
(excluded) and ``--seconds`` (measured).
"""

from __future__ import annotations

import argparse
import json
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

from benchmarks.latency import PERCENTILES, percentile
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.embedded.log.factory import LogSystemFactory
from millstream.model import OutgoingMessageEnvelope, SystemStream

REPO = Path(__file__).resolve().parents[1]
CONTENDERS = ("raw-log", "millstream", "millstream-tuned", "millstream-spark")
TUNED = ("task.commit.ms=10000", "task.commit.snapshot.beside.processing.enabled=true")
TASKS = {"w1": "PassThrough", "w2": "CountPerKey"}
SOURCE, SINK = SystemStream("log", "lat-in"), SystemStream("log", "lat-out")
PROBE_RATE = 10.0


class LogReader(threading.Thread):
    """Every record of ``log.lat-out`` as the log makes it readable: (send ns, latency ns) per first-seen seq."""

    def __init__(self, config: Config, partitions: int, workload: str) -> None:
        super().__init__(daemon=True, name="log-reader")
        self.consumer = LogSystemFactory().get_consumer("log", config)
        self.ssps = {SINK.partition(p) for p in range(partitions)}
        for ssp in self.ssps:
            self.consumer.register(ssp, "0")
        self.workload = workload
        self.seen: set[int] = set()
        self.measured: list[tuple[int, int, int]] = []
        """(seq, send ns, latency ns)."""
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        self.consumer.start()
        try:
            while not self.stopping.is_set():
                polled = self.consumer.poll(self.ssps, 0.005)
                now = time.time_ns()
                with self.lock:
                    for envelopes in polled.values():
                        for envelope in envelopes:
                            if not envelope.is_end_of_stream and envelope.message is not None:
                                self._record(envelope.message, now)
        finally:
            self.consumer.stop()

    def _record(self, value: bytes, now: int) -> None:
        fields = value.split(b",", 3)
        seq, sent = (int(fields[1]), int(fields[2])) if self.workload == "w2" else (int(fields[0]), int(fields[1]))
        if seq not in self.seen:
            self.seen.add(seq)
            self.measured.append((seq, sent, now - sent))

    def count(self, below: int) -> int:
        with self.lock:
            return sum(1 for seq in self.seen if seq < below)


class LogWriter:
    """Appends records to ``log.lat-in`` through the log's producer."""

    def __init__(self, config: Config, args: argparse.Namespace) -> None:
        self.producer = LogSystemFactory().get_producer("log", config)
        self.producer.start()
        self.args = args
        self.sent = 0

    def send(self) -> None:
        seq, now = self.sent, time.time_ns()
        head = b"%d,%d," % (seq, now)
        key_index = seq % self.args.keys
        envelope = OutgoingMessageEnvelope(
            SOURCE,
            head + b"x" * max(0, self.args.size - len(head)),
            b"key-%d" % key_index,
            partition=key_index % self.args.partitions,
        )
        self.producer.send("writer", envelope)
        self.sent += 1

    def flush(self) -> None:
        self.producer.flush("writer")

    def stop(self) -> None:
        self.producer.stop()


def contender_command(contender: str, args: argparse.Namespace, workdir: Path, workload: str) -> list[str]:
    if contender == "raw-log":
        command = [sys.executable, "-m", "benchmarks.latency_tasks", "raw-log", "--path", str(workdir / "log")]
        command += ["--input", SOURCE.stream, "--output", SINK.stream, "--workload", workload]
        return [*command, "--partitions", str(args.partitions)]
    values: dict[str, Any] = {
        "job.name": f"latency-log-{contender}-{workload}",
        "job.data.dir": str(workdir / "data"),
        "job.container.count": 1,
        "systems.log.path": str(workdir / "log"),
        "systems.log.samza.offset.default": "oldest",
        "task.class": f"benchmarks.latency_tasks:{TASKS[workload]}",
        "task.inputs": f"log.{SOURCE.stream}",
        "bench.output": SINK.stream,
        "bench.output.system": "log",
    }
    if workload == "w2":
        values["stores.counts.factory"] = "rocksdb"
        values["stores.counts.changelog"] = "log.lat-counts-changelog"
    for setting in (args.set or TUNED) if contender == "millstream-tuned" else ():
        key, _, value = setting.partition("=")
        values[key.strip()] = value.strip()
    properties = workdir / "job.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    command = [sys.executable, "-c", "from millstream.cli.main import main; main()", "run", str(properties), "-q"]
    return command + ([] if contender == "millstream-spark" else ["--in-process"])


def paced(writer: LogWriter, rate: float, seconds: float, process: subprocess.Popen[bytes]) -> None:
    started, index, total = time.monotonic(), 0, int(rate * seconds)
    while index < total:
        if process.poll() is not None:
            raise RuntimeError(f"the contender exited ({process.returncode}) while records were written")
        due = min(total, int((time.monotonic() - started) * rate) + 1)
        while index < due:
            writer.send()
            index += 1
        writer.flush()
        time.sleep(max(0.0, started + index / rate - time.monotonic()))


def measure(contender: str, workload: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    workdir = root / f"{contender}-{workload}"
    config = Settings({"systems.log.path": str(workdir / "log")})
    admin = LogSystemFactory().get_admin("log", config)
    admin.start()
    for stream in (SOURCE, SINK):
        admin.create_stream(StreamSpec("log", stream.stream, args.partitions))
    admin.stop()
    command = contender_command(contender, args, workdir, workload)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    log = (args.logs / f"{contender}-{workload}.log").open("wb")
    reader, writer = LogReader(config, args.partitions, workload), LogWriter(config, args)
    reader.start()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + args.startup_timeout
        while not reader.seen:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{contender} {workload}: no output (exit {process.poll()}); see {log.name}")
            writer.send()
            writer.flush()
            time.sleep(1 / PROBE_RATE)
        paced(writer, args.rate, args.warmup, process)
        first_measured = writer.sent
        paced(writer, args.rate, args.seconds, process)
        deadline = time.monotonic() + args.deadline
        while reader.count(writer.sent) < writer.sent and time.monotonic() < deadline:
            time.sleep(0.2)
        missing = writer.sent - reader.count(writer.sent)
    finally:
        writer.stop()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
        reader.stopping.set()
        reader.join(30)
        log.close()
    if missing:
        raise RuntimeError(f"{contender} {workload}: {missing:,} of {writer.sent:,} records missing; see {log.name}")
    latencies = sorted(latency / 1e6 for seq, _, latency in reader.measured if seq >= first_measured)
    stats = {label: percentile(latencies, q) for label, q in PERCENTILES}
    print(
        f"  {contender:<17} {workload}: {len(latencies):,} records, "
        + "  ".join(f"{label} {value:,.1f} ms" for label, value in stats.items()),
        flush=True,
    )
    return {"contender": contender, "workload": workload, "latency_ms": stats, "records": len(latencies)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.latency_log", description=__doc__)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--workload", action="append", choices=list(TASKS), help="repeatable; default both")
    parser.add_argument("--contender", action="append", choices=CONTENDERS, help="repeatable; default all")
    parser.add_argument("--set", action="append", metavar="KEY=VALUE", help="millstream-tuned's overrides")
    parser.add_argument("--startup-timeout", type=float, default=240.0)
    parser.add_argument("--deadline", type=float, default=150.0)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "latency_log.json")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="millstream-latency-log-"))
    args.logs = Path(tempfile.mkdtemp(prefix="millstream-latency-log-logs-"))
    print(f"contenders' logs in {args.logs}", flush=True)
    print(f"embedded log, {args.rate:,} msg/s for {args.seconds:g} s (after {args.warmup:g} s warm-up), "
          f"{args.partitions} partitions, {args.keys:,} keys", flush=True)  # fmt: skip
    results: list[dict[str, Any]] = []
    try:
        for workload in args.workload or list(TASKS):
            for contender in args.contender or CONTENDERS:
                try:
                    results.append(measure(contender, workload, args, root))
                except RuntimeError as error:
                    print(f"  {contender} {workload}: FAILED: {error}", flush=True)
                    results.append({"contender": contender, "workload": workload, "error": str(error)})
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for row in results:
        raw = next((r for r in results if r["contender"] == "raw-log" and r["workload"] == row["workload"]), None)
        if raw is not None and "error" not in row and "error" not in raw:
            row["ratio_to_raw"] = {
                k: v / raw["latency_ms"][k] for k, v in row["latency_ms"].items() if raw["latency_ms"][k]
            }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    args.out.write_text(json.dumps({"args": settings, "results": results}, indent=1))
    print(f"written {args.out}", flush=True)


if __name__ == "__main__":
    main()
