"""millstream as a contender: the W1 or W2 job over the input topic, in-process with one container or
through the Spark runner (``--containers 2 --spark``), checkpoints and metadata in Kafka, W2's store
RocksDB with a Kafka changelog (the durable default). Run by the benchmark as its own process:

    python -m benchmarks.peers.millstream_job --bootstrap ... --workload w1 [--spark --containers 2] [--batch]

``--batch`` runs the batch-API tasks (``BatchStreamTask`` with ``send_batch``) instead of the per-message ones;
``--metrics`` turns metrics on (``metrics.enabled``: every meter, the lag refresh and a snapshot shipped to the
metadata store every ``metrics.snapshot.interval.ms``, 5 s by default), as a user who watches a job runs it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.peers.scripts.common import parse_args
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.testing import InProcessRunner


def job_config(args: object, workdir: Path) -> Config:
    values = vars(args)
    tasks = {"w1": "PassThrough", "w2": "CountPerKey"}
    if values.get("batch"):
        tasks = {"w1": "PassThroughBatch", "w2": "CountPerKeyBatch"}
    config: dict[str, object] = {
        "job.name": values["name"],
        "job.data.dir": str(workdir / "data"),
        "job.container.count": values["containers"],
        "metadata.store.factory": "kafka",
        "task.checkpoint.factory": "kafka",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.bootstrap.servers": values["bootstrap"],
        "systems.kafka.samza.offset.default": "oldest",
        "task.class": f"benchmarks.peers.millstream_tasks:{tasks[values['workload']]}",
        "task.inputs": f"kafka.{values['input']}",
        "task.commit.ms": 10_000,
        "bench.messages.per.partition": values["messages"] // values["partitions"],
        "bench.output": values["output"],
    }
    if values.get("metrics"):
        config["metrics.enabled"] = "true"
    if values["workload"] == "w2":
        config["stores.counts.factory"] = "rocksdb"
        config["stores.counts.changelog"] = f"kafka.{values['name']}-counts-changelog"
    return prepare(Settings(config))


def main() -> None:
    spark = "--spark" in sys.argv
    if spark:
        sys.argv.remove("--spark")
    batch = "--batch" in sys.argv
    if batch:
        sys.argv.remove("--batch")
    metrics = "--metrics" in sys.argv
    if metrics:
        sys.argv.remove("--metrics")
    args = parse_args()
    args.batch = batch
    args.metrics = metrics
    config = job_config(args, Path(args.workdir))
    if spark:
        from millstream.spark.run.runner import SparkJobRunner

        result = SparkJobRunner(config).run()
    else:
        result = InProcessRunner(config).run()
    if result.outcome != "finished":
        raise SystemExit(f"job {args.name} ended {result.outcome}: {result.error}")
    rates = [c.messages / c.processing_seconds for c in result.containers if c.processing_seconds > 0]
    print(json.dumps({"messages": result.messages, "container_rates": rates}))


if __name__ == "__main__":
    main()
