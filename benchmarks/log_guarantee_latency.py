"""End-to-end latency and CPU cost on the embedded log: at-least-once vs exactly-once, pass-through.

    python -m benchmarks.log_guarantee_latency [--rate 1000] [--seconds 15] [--warmup 3] [--partitions 2]

A writer appends ``--rate`` messages per second to ``log.bench`` (each value its send time in ns, appended at
once: a producer flush per message), one container (``millstream run --in-process``) copies them to
``log.bench-out`` (``benchmarks.tasks:BytesPassThrough``), and a reader polls ``log.bench-out``; latency = the
time the reader got a record - its send time. Contenders, in turn, each on a fresh log:
  at-least-once   the default config (output readable as written: ``producer.linger.ms`` 5 ms)
  exactly-once    ``task.processing.guarantee=exactly-once`` (output readable at each transaction's commit,
                  every 100 ms) with ``task.checkpoint.factory=log``
Probes (one per 100 ms) go first until the job's output has one; then the first ``--warmup`` seconds
are excluded. Also reported: the job's CPU seconds per 1,000 messages (its
process's user + system time over the run), which a loaded machine disturbs far less than a rate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import quantiles

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.embedded.log.factory import LogSystemFactory
from millstream.model import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

REPO = Path(__file__).resolve().parents[1]
CONTENDERS = {
    "at-least-once": {},
    "exactly-once": {"task.processing.guarantee": "exactly-once", "task.checkpoint.factory": "log"},
}


def run(name: str, extra: dict[str, str], args: argparse.Namespace) -> tuple[float, float, float, int]:
    """p50 and p99 latency (ms), CPU seconds per 1,000 messages and the messages measured, of one contender."""
    root = Path(tempfile.mkdtemp(prefix=f"millstream-latency-{name}-"))
    log_config = Settings({"systems.log.path": str(root / "log")})
    factory = LogSystemFactory()
    admin = factory.get_admin("log", log_config)
    for stream in ("bench", "bench-out"):
        admin.create_stream(StreamSpec("log", stream, args.partitions))
    values = {
        "job.name": "latency",
        "job.data.dir": str(root / "data"),
        "systems.log.path": str(root / "log"),
        "systems.log.samza.offset.default": "oldest",
        "task.class": "benchmarks.tasks:BytesPassThrough",
        "task.inputs": "log.bench",
        **extra,
    }
    properties = root / "job.properties"
    properties.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    job = subprocess.Popen(
        [sys.executable, "-m", "millstream.cli.main", "run", str(properties), "--in-process"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    latencies: list[float] = []
    stop = threading.Event()
    reader = threading.Thread(target=read, args=(log_config, args, latencies, stop), daemon=True)
    reader.start()
    try:
        probe(log_config, latencies)
        cpu_before = cpu_seconds(job.pid)
        sent = write(log_config, args)
        cpu = cpu_seconds(job.pid) - cpu_before
        deadline = time.monotonic() + 30
        while len(latencies) < sent and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        job.terminate()
        job.wait(60)
        reader.join(10)
        shutil.rmtree(root, ignore_errors=True)
    measured = latencies[int(args.rate * args.warmup) :]
    cuts = quantiles(measured, n=100)
    return cuts[49], cuts[98], cpu / sent * 1000, len(measured)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def probe(config: Config, latencies: list[float]) -> None:
    """Send a message every 100 ms until the job's output has one (it has started), then forget them."""
    producer = LogSystemFactory().get_producer("log", config)
    producer.start()
    deadline = time.monotonic() + 240
    while not latencies:
        if time.monotonic() > deadline:
            raise RuntimeError("the job wrote no output within 240 s")
        value = str(time.time_ns()).encode()
        producer.send("bench", OutgoingMessageEnvelope(SystemStream("log", "bench"), value, partition=0))
        producer.flush("bench")
        time.sleep(0.1)
    producer.stop()
    time.sleep(0.5)
    latencies.clear()


def write(config: Config, args: argparse.Namespace) -> int:
    producer = LogSystemFactory().get_producer("log", config)
    producer.start()
    stream = SystemStream("log", "bench")
    total = int(args.rate * (args.warmup + args.seconds))
    started = time.monotonic()
    for index in range(total):
        delay = started + index / args.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        value = str(time.time_ns()).encode()
        producer.send("bench", OutgoingMessageEnvelope(stream, value, partition=index % args.partitions))
        producer.flush("bench")
    producer.stop()
    return total


def read(config: Config, args: argparse.Namespace, latencies: list[float], stop: threading.Event) -> None:
    consumer = LogSystemFactory().get_consumer("log", config)
    ssps = {SystemStreamPartition("log", "bench-out", partition) for partition in range(args.partitions)}
    for ssp in ssps:
        consumer.register(ssp, "0")
    consumer.start()
    try:
        while not stop.is_set():
            for batch in consumer.poll(ssps, 0.05).values():
                now = time.time_ns()
                latencies.extend((now - int(envelope.message)) / 1e6 for envelope in batch)
    finally:
        consumer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rate", type=int, default=1000, help="messages per second (default 1000)")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per contender")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds excluded at the start")
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    print(f"{args.rate}/s for {args.seconds:.0f} s (+{args.warmup:.0f} s warm-up) over {args.partitions} partitions")
    for name, extra in CONTENDERS.items():
        p50, p99, cpu, count = run(name, extra, args)
        print(f"{name:<15} p50 {p50:8.1f} ms   p99 {p99:8.1f} ms   {cpu * 1000:6.1f} ms CPU / 1,000 msgs   ({count:,})")
    os.sync()


if __name__ == "__main__":
    main()
