"""Split and merge the shards of a Kinesis stream under a running job; nothing is lost or reordered.

    make kinesalite && .venv/bin/python -m tests.integration.kinesis.emulator run   # from a checkout: prints its URL
    cd examples/kinesis_resharding
    python run.py --endpoint http://127.0.0.1:4567   # exits 1 if a record is lost or out of order

Against AWS, drop ``--endpoint`` and let boto3 find credentials; the stream is created and deleted here.

1. creates ``orders`` with 2 shards and writes a round of orders (8 customers, the partition key);
2. starts the job (2 containers), then at once splits shard 0 into shards 2 and 3, writes a round,
   merges shards 3 and 1 into shard 4, and writes a last round — the job reads through all of it;
3. checks every order was processed, each customer's orders in the order they were written, and every
   order of a parent shard before any order of its children (a child is read only once its parents were
   read to their end and checkpointed).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from millstream.config import Config
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import load_job_config
from millstream.model import SystemStream
from millstream.spark.runner import SparkJobRunner
from millstream.systems.base import StreamSpec
from millstream.systems.registry import system_factory
from millstream.testing import read_stream, write_stream

HERE = Path(__file__).parent
SEEN = SystemStream("log", "orders-seen")
CUSTOMERS, PER_ROUND = 8, 5  # each round writes PER_ROUND orders per customer


class Orders:
    """Writes rounds of orders, numbered per customer, and remembers each customer's order."""

    def __init__(self, config: Config, stream: str) -> None:
        self.config, self.stream = config, SystemStream("kinesis", stream)
        self.written: dict[str, list[int]] = {f"customer-{c}": [] for c in range(CUSTOMERS)}

    def write_round(self) -> None:
        batch = []
        for _ in range(PER_ROUND):
            for customer, numbers in self.written.items():
                numbers.append(len(numbers))
                batch.append((customer, {"n": numbers[-1]}))
        write_stream(self.config, self.stream, batch)


def seen(config: Config) -> list[dict[str, Any]]:
    return [record for _, record in read_stream(config, SEEN, idle_timeout=0.5).get(0, [])]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"gave up after {timeout} s waiting for {what}")
        time.sleep(0.2)


def first_times(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each order at the first time it was processed (at-least-once: a restart may deliver one again)."""
    done: set[tuple[str, int]] = set()
    first = []
    for record in records:
        if (record["customer"], record["n"]) not in done:
            done.add((record["customer"], record["n"]))
            first.append(record)
    return first


def problems(records: list[dict[str, Any]], written: dict[str, list[int]], lineage: dict[str, tuple]) -> list[str]:
    """Customers whose orders were not processed as written; children read before a parent ended."""
    first = first_times(records)
    found = []
    for customer, numbers in written.items():
        processed = [r["n"] for r in first if r["customer"] == customer]
        if processed != numbers:
            found.append(f"{customer}: processed {processed}, written {numbers}")
    last_of = {record["shard"]: index for index, record in enumerate(first)}
    for child, parents in ((child, parents) for child, parents in lineage.items() if parents):
        start = next((index for index, record in enumerate(first) if record["shard"] == child), None)
        if start is None:
            found.append(f"no order reached {child}: nothing shows the order across the resharding")
            continue
        found += [f"{child} read before its parent {p} ended" for p in parents if last_of.get(p, -1) > start]
    return found


def main(argv: list[str] | None = None, spark: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoint", help="Kinesis endpoint URL (kinesalite); default: AWS")
    parser.add_argument("--stream", default="orders", help="the Kinesis stream to create, use and delete")
    parser.add_argument("--data-dir", type=Path, default=HERE / ".millstream")
    args = parser.parse_args(argv)
    shutil.rmtree(args.data_dir, ignore_errors=True)
    overrides = {"job.data.dir": str(args.data_dir), "task.inputs": f"kinesis.{args.stream}"}
    if args.endpoint:  # kinesalite takes any credentials
        overrides |= {"systems.kinesis.aws.endpoint": args.endpoint, "systems.kinesis.aws.accessKey": "example"}
        overrides |= {"sensitive.systems.kinesis.aws.secretKey": "example"}
    config = load_job_config(HERE / "job.yaml", overrides)
    kinesis = system_factory(config, "kinesis").get_admin("kinesis", config)
    log = system_factory(config, "log").get_admin("log", config)
    kinesis.start()
    log.start()
    kinesis.create_stream(StreamSpec("kinesis", args.stream, 2))
    log.create_stream(StreamSpec("log", SEEN.stream, 1))
    orders = Orders(config, args.stream)
    orders.write_round()

    runner = SparkJobRunner(config, spark=spark)
    outcome: list[JobResult] = []
    job = threading.Thread(target=lambda: outcome.append(runner.run()))
    job.start()
    kinesis.split_shard(args.stream, "shardId-000000000000")  # → shardId-...2 and ...3
    orders.write_round()
    kinesis.merge_shards(args.stream, "shardId-000000000003", "shardId-000000000001")  # → shardId-...4
    orders.write_round()
    total = CUSTOMERS * PER_ROUND * 3
    wait_for(lambda: len({(r["customer"], r["n"]) for r in seen(config)}) >= total, f"all {total} orders")
    runner.request_stop()
    job.join()
    lineage = {shard.shard_id: tuple(shard.parents) for shard in kinesis.list_shards(args.stream)}
    kinesis.clear_stream(StreamSpec("kinesis", args.stream))
    kinesis.stop()
    log.stop()

    records = seen(config)
    for shard in sorted(lineage):
        parents = ", ".join(lineage[shard]) or "-"
        print(f"{shard} (parents {parents}): {sum(r['shard'] == shard for r in records)} orders")
    wrong = problems(records, orders.written, lineage)
    if outcome[0].outcome != "stopped" or wrong:
        print(f"WRONG: {outcome[0].outcome} {outcome[0].error or ''}", *wrong, sep="\n  ")
        return 1
    print(f"OK: {total} orders, each customer's in order, every parent shard read before its children")
    return 0


if __name__ == "__main__":
    sys.exit(main())
