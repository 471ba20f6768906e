"""Adjunct data stores: bootstrap rate into RocksDB and lookup latency, vs. a raw read of the same stream, in one run.

    python -m benchmarks.adjunct_bootstrap [--records 1000000] [--partitions 4] [--size 100]
                                           [--lookups 200000] [--misses 0.1] [--no-spark]

The adjunct stream ``log.adj`` holds ``--records`` keyed JSON records of about ``--size`` bytes, one key
each, record i on partition i mod ``--partitions``. Every figure comes from that data in the same run:
  raw read        the log consumer's poll loop alone (benchmarks/log_raw_read.py)
  bootstrap       stored / bootstrap seconds of a 1-container in-process job whose main input is one
                  sealed message per partition and whose adjunct stream is ``samza.bootstrap``:
                    raw, string/bytes   stream serdes = store serdes: bytes go to RocksDB as they came
                                        (the key is still decoded once to check it)
                    raw, string/json    the same, but the once-only check decodes every JSON record
                    extractor, json     decode, project to {currency, rate}, encode (no raw path)
  lookups         a task doing one ``get`` per main-input message on the string/bytes store (keys drawn
                  from the stored ones, ``--misses`` of them absent), timed with perf_counter_ns; its
                  rate is compared with the same task's loop without the ``get``
  spark           the string/bytes bootstrap through the Spark runner with 2 containers
Bootstrap rates are the container's stored messages / its bootstrap seconds (the final flush included);
lookup rates are its messages / the time from its first to its last message.
The lookup jobs reopen the store the string/bytes bootstrap left (valid, so it is not read again; its
blocks are in the OS page cache, as on a host whose store fits in memory) and read ``log.lookups`` from
its start each time (``samza.reset.offset``).

measured on this machine (2 cores), defaults, quiet machine, after resolving serdes once per route and
cheaper JSON writes (two runs; the Spark figure moved from 34 % to 88 % between them):
  1,000,000 keyed records of 100 B over 4 partitions; 200,000 lookups, 10% misses
  raw read (log consumer)              1,797,620 records/s    100%
  bootstrap, raw, string/bytes           597,100 records/s     33% of raw read
  bootstrap, raw, string/json            434,786 records/s     24% of raw read
  bootstrap, extractor, string/json      212,456 records/s     12% of raw read
  lookups, 1 container                   111,418 lookups/s     16% of the loop without get (695,997 msgs/s)
    get latency                     p50 6.2 µs  p99 15.4 µs  p999 94.8 µs  max 415 µs
  bootstrap, Spark, 2 ctrs               606,010 records/s     34% of raw read   per container: 366,112, 303,005
The first version of this benchmark, on a loaded machine (load ~4), measured 35 % / 24 % / 10 % and p99 19 µs.
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import adjunct_tasks
from benchmarks.log_raw_read import raw_read_rate
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.embedded.log.factory import LogSystemFactory
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.testing import InProcessRunner

ADJUNCT = SystemStream("log", "adj")
TINY = SystemStream("log", "tiny")
LOOKUPS = SystemStream("log", "lookups")
EXTRACTOR = "benchmarks.adjunct_tasks:CurrencyAndRateFactory"

VARIANTS: list[tuple[str, str, str | None]] = [
    ("raw, string/bytes", "bytes", None),
    ("raw, string/json", "json", None),
    ("extractor, string/json", "json", EXTRACTOR),
]
"""(name, message serde of stream and store, extractor factory)."""


def _log_config(root: Path) -> Config:
    return Settings({"systems.log.path": str(root / "log")})


def key_of(index: int) -> str:
    return f"k{index:09d}"


def record_of(index: int, size: int) -> bytes:
    head = f'{{"id":{index},"currency":"c{index % 170:03d}","rate":{(index % 9973) / 997:.4f},"pad":"'
    return (head + "x" * max(size - len(head) - 2, 0) + '"}').encode()


def write_stream(root: Path, stream: SystemStream, partitions: int, entries: Any) -> float:
    """Create ``stream`` and append ``entries`` (key bytes, message bytes, partition); return messages/s."""
    factory = LogSystemFactory()
    config = _log_config(root)
    factory.get_admin("log", config).create_stream(StreamSpec("log", stream.stream, partitions))
    producer = factory.get_producer("log", config)
    producer.start()
    count = 0
    started = time.perf_counter()
    for key, message, partition in entries:
        producer.send("bench", OutgoingMessageEnvelope(stream, message, key, partition=partition))
        count += 1
    producer.flush("bench")
    elapsed = time.perf_counter() - started
    producer.stop()
    return count / max(elapsed, 1e-9)


def write_data(root: Path, records: int, partitions: int, size: int, lookups: int, misses: float) -> float:
    """The adjunct stream (left open, as a live one is), the sealed tiny input and the sealed lookups."""
    rate = write_stream(
        root,
        ADJUNCT,
        partitions,
        ((key_of(i).encode(), record_of(i, size), i % partitions) for i in range(records)),
    )
    write_stream(root, TINY, partitions, ((b"t", b"t", p) for p in range(partitions)))
    rng = random.Random(7)
    chosen = []
    for j in range(lookups):
        if rng.random() < misses:
            chosen.append((f"miss{j}".encode(), b"x", j % partitions))
        else:
            i = rng.randrange(records)
            chosen.append((key_of(i).encode(), b"x", i % partitions))
    write_stream(root, LOOKUPS, partitions, chosen)
    admin = LogSystemFactory().get_admin("log", _log_config(root))
    admin.seal_stream(TINY.stream)
    admin.seal_stream(LOOKUPS.stream)
    return rate


def job_config(
    root: Path, run: str, msg_serde: str, extractor: str | None, *, task: str, inputs: SystemStream, containers: int
) -> Config:
    values: dict[str, Any] = {
        "job.name": f"bench-adjunct-{run}",
        "job.data.dir": str(root / "data" / run),
        "job.container.count": containers,
        "systems.log.path": str(root / "log"),
        "systems.log.samza.offset.default": "oldest",
        "task.class": task,
        "task.inputs": str(inputs),
        "task.commit.ms": 10_000,
        f"systems.log.streams.{LOOKUPS.stream}.samza.key.serde": "string",
        f"systems.log.streams.{LOOKUPS.stream}.samza.reset.offset": "true",
        f"systems.log.streams.{ADJUNCT.stream}.samza.bootstrap": "true",
        f"systems.log.streams.{ADJUNCT.stream}.samza.key.serde": "string",
        f"systems.log.streams.{ADJUNCT.stream}.samza.msg.serde": msg_serde,
        f"stores.{adjunct_tasks.STORE}.adstore.input": str(ADJUNCT),
        f"stores.{adjunct_tasks.STORE}.key.serde": "string",
        f"stores.{adjunct_tasks.STORE}.msg.serde": msg_serde,
    }
    if extractor:
        values[f"stores.{adjunct_tasks.STORE}.adstore.key.value.extractor.factory"] = extractor
    return prepare(Settings(values))


def finished(result: JobResult) -> JobResult:
    assert result.outcome == "finished", result.error
    return result


def bootstrap_rates(result: JobResult) -> tuple[float, list[float]]:
    """Aggregate (all stored / the slowest container's bootstrap) and per-container records/s."""
    containers = [c for c in result.containers if c.bootstrap_seconds > 0]
    stored = sum(c.adjunct_stored for c in containers)
    aggregate = stored / max(c.bootstrap_seconds for c in containers)
    return aggregate, [c.adjunct_stored / c.bootstrap_seconds for c in containers]


def processing_rate(result: JobResult) -> float:
    return result.messages / max(c.processing_seconds for c in result.containers)


def percentile(ordered: list[int], q: float) -> float:
    """Nearest rank, in µs."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def timed_run(config: Config) -> tuple[JobResult, list[int], float]:
    adjunct_tasks.LATENCIES_NS.clear()
    started = time.perf_counter()
    result = finished(InProcessRunner(config).run())
    return result, sorted(adjunct_tasks.LATENCIES_NS), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--lookups", type=int, default=200_000)
    parser.add_argument("--misses", type=float, default=0.1, help="fraction of lookups of absent keys")
    parser.add_argument("--no-spark", action="store_true", help="skip the Spark runner measurement")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-"))
    try:
        write = write_data(root, args.records, args.partitions, args.size, args.lookups, args.misses)
        print(
            f"{args.records:,} keyed records of {args.size} B over {args.partitions} partitions "
            f"(written at {write:,.0f}/s); {args.lookups:,} lookups, {args.misses:.0%} misses"
        )
        raw = max(raw_read_rate(root / "log", ADJUNCT.stream, args.partitions) for _ in range(2))
        print(f"{'raw read (log consumer)':<34}{raw:>12,.0f} records/s  {1:>6.0%}")

        kept = ""
        for index, (name, msg_serde, extractor) in enumerate(VARIANTS):
            run = f"b{index}"
            config = job_config(
                root, run, msg_serde, extractor, task="benchmarks.tasks:NoOp", inputs=TINY, containers=1
            )
            started = time.perf_counter()
            result = finished(InProcessRunner(config).run())
            wall = time.perf_counter() - started
            rate, _ = bootstrap_rates(result)
            stored = sum(c.adjunct_stored for c in result.containers)
            print(
                f"{'bootstrap, ' + name:<34}{rate:>12,.0f} records/s  {rate / raw:>6.0%} of raw read"
                f"   ({stored:,} stored, wall {wall:.1f}s incl. start-up)"
            )
            if msg_serde == "bytes" and extractor is None:
                kept = run
            else:
                shutil.rmtree(root / "data" / run, ignore_errors=True)

        rates: dict[str, float] = {}
        for task in ("TimedNothing", "TimedLookup"):
            config = job_config(
                root,
                kept,
                "bytes",
                None,
                task=f"benchmarks.adjunct_tasks:{task}",
                inputs=LOOKUPS,
                containers=1,
            )
            result, samples, wall = timed_run(config)
            rates[task] = processing_rate(result)
            if task == "TimedLookup":
                assert len(samples) == args.lookups, (len(samples), args.lookups)
                print(
                    f"{'lookups, 1 container':<34}{rates[task]:>12,.0f} lookups/s  "
                    f"{rates[task] / rates['TimedNothing']:>6.0%} of the loop without get "
                    f"({rates['TimedNothing']:,.0f} msgs/s)"
                )
                print(
                    f"{'  get latency':<34}p50 {percentile(samples, 0.5):.1f} µs  p99 "
                    f"{percentile(samples, 0.99):.1f} µs  p999 {percentile(samples, 0.999):.1f} µs  "
                    f"max {samples[-1] / 1000:,.0f} µs   (wall {wall:.1f}s)"
                )
        shutil.rmtree(root / "data" / kept, ignore_errors=True)

        if not args.no_spark:
            from millstream.spark.run.runner import SparkJobRunner

            config = job_config(root, "spark", "bytes", None, task="benchmarks.tasks:NoOp", inputs=TINY, containers=2)
            started = time.perf_counter()
            result = finished(SparkJobRunner(config).run())
            wall = time.perf_counter() - started
            aggregate, per_container = bootstrap_rates(result)
            print(
                f"{'bootstrap, Spark, 2 ctrs':<34}{aggregate:>12,.0f} records/s  {aggregate / raw:>6.0%} of raw read"
                "   per container: "
                + ", ".join(f"{rate:,.0f}" for rate in per_container)
                + f"   (wall {wall:.1f}s incl. start-up)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
