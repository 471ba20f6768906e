"""In-band control messages: their overhead and how fast watermarks cross ``partition_by`` hops.

    python -m benchmarks.control_overhead [--partitions 4] [--messages 40000] [--rate 2000] [--seconds 6]

For one and two hops, with control messages broadcast to every partition (the default) and aggregated
through one partition (``app.control.aggregation``), on the in-process runner (2 containers, tasks =
source partitions = intermediate partitions):

  bounded run    ``--messages`` messages written up front; source throughput (messages / the slowest
                 container's processing time), and the control messages and bytes found in the
                 intermediate streams afterwards next to the user messages and bytes
  paced run      ``--rate`` messages/s with event time = wall clock for ``--seconds``; the watermark delay
                 is the wall clock at the sink minus the watermark that arrived (out-of-orderness 0:
                 how stale event time is downstream), median and 90th percentile

Figures are from one run on a shared machine: compare rows with each other, not with other machines.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.control_apps import ARRIVALS
from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.control.framing import MessageType
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, write_stream

SOURCE = SystemStream("log", "bench-in")


def config(root: Path, run: str, app: str, aggregate: bool, partitions: int) -> Config:
    return prepare(
        Settings(
            {
                "job.name": f"bench-{run}",
                "job.data.dir": str(root / run),
                "job.container.count": 2,
                "app.class": f"benchmarks.control_apps:{app}",
                "app.control.aggregation": str(aggregate).lower(),
                "app.intermediate.partitions": partitions,
                "systems.log.samza.offset.default": "oldest",
                "task.commit.ms": 10_000,
                "bench.run": run,
            }
        )
    )


def create_source(cfg: Config, partitions: int) -> None:
    admin = system_factory(cfg, "log").get_admin("log", cfg)
    admin.create_stream(StreamSpec("log", SOURCE.stream, partitions))


def seal(cfg: Config) -> None:
    admin = system_factory(cfg, "log").get_admin("log", cfg)
    admin.seal_stream(SOURCE.stream)


def write(cfg: Config, partitions: int, start: int, count: int) -> None:
    now = int(time.time() * 1000)
    per_partition: dict[int, list[tuple[Any, Any]]] = {p: [] for p in range(partitions)}
    for n in range(start, start + count):
        per_partition[n % partitions].append((None, {"user": f"u{n % 50}", "n": n, "ts": now}))
    for partition, pairs in per_partition.items():
        write_stream(cfg, SOURCE, pairs, partition=partition)


def intermediate_traffic(cfg: Config) -> dict[str, int]:
    """User and control records and bytes in every intermediate stream of the run."""
    counts = {"user": 0, "user_bytes": 0, "control": 0, "control_bytes": 0}
    factory = system_factory(cfg, "log")
    admin = factory.get_admin("log", cfg)
    prefix = f"{cfg['app.name']}-{cfg['app.id']}-"
    for stream in admin.list_streams():
        if not stream.startswith(prefix):
            continue
        metadata = admin.get_system_stream_metadata([stream])[stream]
        consumer = factory.get_consumer("log", cfg)
        remaining = {}
        for partition, info in metadata.partitions.items():
            if info.oldest_offset is not None:
                ssp = SystemStream("log", stream).partition(partition)
                consumer.register(ssp, info.oldest_offset)
                remaining[ssp] = int(info.upcoming_offset) - int(info.oldest_offset)
        consumer.start()
        try:
            while any(remaining.values()):
                for ssp, batch in consumer.poll({s for s, n in remaining.items() if n}, 1.0).items():
                    for envelope in batch:
                        size = len(envelope.message) + len(envelope.key or b"")
                        kind = "user" if envelope.message[0] == MessageType.USER_MESSAGE else "control"
                        counts[kind] += 1
                        counts[f"{kind}_bytes"] += size
                        remaining[ssp] -= 1
        finally:
            consumer.stop()
    return counts


def bounded(root: Path, app: str, aggregate: bool, partitions: int, messages: int) -> dict[str, Any]:
    run = f"{app.lower()}-{'agg' if aggregate else 'bc'}-bounded"
    cfg = config(root, run, app, aggregate, partitions)
    create_source(cfg, partitions)
    write(cfg, partitions, 0, messages)
    seal(cfg)
    result = InProcessRunner(cfg).run(timeout=600)
    assert result.outcome == "finished", result.error
    busiest = max(c.processing_seconds for c in result.containers)
    return {"throughput": messages / busiest, **intermediate_traffic(cfg)}


def paced(root: Path, app: str, aggregate: bool, partitions: int, rate: int, seconds: float) -> dict[str, Any]:
    run = f"{app.lower()}-{'agg' if aggregate else 'bc'}-paced"
    cfg = config(root, run, app, aggregate, partitions)
    create_source(cfg, partitions)
    runner = InProcessRunner(cfg)
    job = threading.Thread(target=runner.run, kwargs={"timeout": seconds + 60})
    job.start()
    written, started, step = 0, time.monotonic(), 0.05
    while time.monotonic() - started < seconds:
        batch = int(rate * step)
        write(cfg, partitions, written, batch)
        written += batch
        time.sleep(max(0.0, started + written / rate - time.monotonic()))
    seal(cfg)
    job.join()
    arrivals = ARRIVALS.get(run, [])
    settled = [now - watermark for now, watermark in arrivals[len(arrivals) // 5 :]]  # skip the start-up
    traffic = intermediate_traffic(cfg)
    return {
        "delay_p50": statistics.median(settled) if settled else float("nan"),
        "delay_p90": statistics.quantiles(settled, n=10)[-1] if len(settled) >= 10 else float("nan"),
        "watermarks": len(arrivals),
        "written": written,
        **traffic,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--rate", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-control-"))
    n = args.partitions
    print(
        f"{n} source partitions = {n} producing tasks, {n} intermediate partitions, 2 containers, "
        f"watermark interval 200 ms; bounded: {args.messages:,} messages; paced: {args.rate:,}/s for {args.seconds:g} s"
    )
    header = (
        f"{'pipeline':<24}{'msgs/s':>10}{'ctl msgs':>10}{'ctl/user':>10}{'ctl bytes':>11}{'ctl/user B':>11}"
        f"{'paced ctl/user':>16}{'wm delay p50':>14}{'p90':>10}"
    )
    print(header)
    try:
        for app in ("OneHop", "TwoHops"):
            for aggregate in (False, True):
                name = f"{'1 hop' if app == 'OneHop' else '2 hops'}, {'aggregated' if aggregate else 'broadcast'}"
                b = bounded(root, app, aggregate, n, args.messages)
                p = paced(root, app, aggregate, n, args.rate, args.seconds)
                print(
                    f"{name:<24}{b['throughput']:>10,.0f}{b['control']:>10,}{b['control'] / b['user']:>10.3f}"
                    f"{b['control_bytes']:>11,}{b['control_bytes'] / b['user_bytes']:>11.3f}"
                    f"{p['control'] / max(p['user'], 1):>16.3f}{p['delay_p50']:>11,.0f} ms{p['delay_p90']:>7,.0f} ms"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
