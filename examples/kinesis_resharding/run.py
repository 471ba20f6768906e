"""Split and merge the shards of a Kinesis stream under a running job; nothing is lost or reordered.

    make kinesalite && .venv/bin/python -m tests.integration.kinesis.emulator run   # from a checkout: prints its URL
    cd examples/kinesis_resharding
    python run.py --endpoint http://127.0.0.1:4567   # exits 1 if a record is lost or out of order

Against AWS, drop ``--endpoint`` and let boto3 find credentials; the stream is created and deleted here.
The shards are split and merged with boto3, as an operator (or ``aws kinesis split-shard``) would.

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

import boto3

from millstream import Job, JobResult, SystemStream

HERE = Path(__file__).parent
SEEN = SystemStream("log", "orders-seen")
CUSTOMERS, PER_ROUND = 8, 5  # each round writes PER_ROUND orders per customer


class Orders:
    """Writes rounds of orders, numbered per customer, and remembers each customer's order."""

    def __init__(self, job: Job, stream: str) -> None:
        self.job, self.stream = job, SystemStream("kinesis", stream)
        self.written: dict[str, list[int]] = {f"customer-{c}": [] for c in range(CUSTOMERS)}

    def write_round(self) -> None:
        batch = []
        for _ in range(PER_ROUND):
            for customer, numbers in self.written.items():
                numbers.append(len(numbers))
                batch.append((customer, {"n": numbers[-1]}))
        self.job.streams.write(self.stream, batch)


class Shards:
    """Splits and merges the shards of a stream through the Kinesis API, waiting for the stream to be ACTIVE."""

    def __init__(self, endpoint: str | None, stream: str) -> None:
        self.stream = stream
        credentials = {"aws_access_key_id": "example", "aws_secret_access_key": "example"} if endpoint else {}
        self.client = boto3.client("kinesis", region_name="us-east-1", endpoint_url=endpoint, **credentials)

    def listed(self) -> list[dict[str, Any]]:
        return self.client.list_shards(StreamName=self.stream)["Shards"]

    def split(self, shard_id: str) -> None:
        """Split ``shard_id`` in the middle of its hash-key range."""
        keys = next(shard["HashKeyRange"] for shard in self.listed() if shard["ShardId"] == shard_id)
        middle = (int(keys["StartingHashKey"]) + int(keys["EndingHashKey"]) + 1) // 2
        self.client.split_shard(StreamName=self.stream, ShardToSplit=shard_id, NewStartingHashKey=str(middle))
        self._wait_for_active()

    def merge(self, shard_id: str, adjacent_shard_id: str) -> None:
        self.client.merge_shards(StreamName=self.stream, ShardToMerge=shard_id, AdjacentShardToMerge=adjacent_shard_id)
        self._wait_for_active()

    def lineage(self) -> dict[str, tuple[str, ...]]:
        """Each shard's parents: the shard split, or the two merged (the one merged first)."""
        parents = ("ParentShardId", "AdjacentParentShardId")
        return {shard["ShardId"]: tuple(shard[key] for key in parents if shard.get(key)) for shard in self.listed()}

    def _wait_for_active(self) -> None:
        self.client.get_waiter("stream_exists").wait(StreamName=self.stream, WaiterConfig={"Delay": 1})


def seen(job: Job) -> list[dict[str, Any]]:
    return [record for _, record in job.streams.read(SEEN, idle_timeout=0.5).get(0, [])]


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
    job = Job.from_file(HERE / "job.yaml", overrides)
    job.streams.create(SystemStream("kinesis", args.stream), 2)
    job.streams.create(SEEN, 1)
    orders = Orders(job, args.stream)
    orders.write_round()
    shards = Shards(args.endpoint, args.stream)

    outcome: list[JobResult] = []
    running = threading.Thread(target=lambda: outcome.append(job.run(spark=spark)))
    running.start()
    shards.split("shardId-000000000000")  # → shardId-...2 and ...3
    orders.write_round()
    shards.merge("shardId-000000000003", "shardId-000000000001")  # → shardId-...4
    orders.write_round()
    total = CUSTOMERS * PER_ROUND * 3
    wait_for(lambda: len({(r["customer"], r["n"]) for r in seen(job)}) >= total, f"all {total} orders")
    job.stop()
    running.join()
    lineage = shards.lineage()
    job.streams.delete(SystemStream("kinesis", args.stream))

    records = seen(job)
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
