"""Reading a log stream as a DataFrame (format ``millstream``) vs. the log consumer's raw read, in one run.

    python -m benchmarks.dataframe_read [--messages 1000000] [--partitions 4] [--runs 2]

Writes JSON values of about 100 bytes, then reports records per second of:
  raw read        the log consumer's poll loop alone, one process (benchmarks/log_raw_read.py)
  DataFrame raw   ``spark.read.format("millstream").option("raw", "true")``, summing the values' lengths
  DataFrame json  the same with the values decoded by the stream's serde (json) into JSON text
Spark runs local[N] with N = partitions, one task per partition; a DataFrame rate is the records over the
wall time of the whole query (planning included), best of ``--runs`` after one warm-up query.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import orjson
import yaml
from pyspark.sql import functions

from benchmarks.log_raw_read import raw_read_rate
from millstream.config import Config
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.spark.datasource import register
from millstream.spark.session import build_session
from millstream.systems.base import StreamSpec
from millstream.systems.log.factory import LogSystemFactory

STREAM = SystemStream("log", "bench")


def write_json(config: Config, partitions: int, messages: int) -> None:
    factory = LogSystemFactory()
    factory.get_admin("log", config).create_stream(StreamSpec("log", STREAM.stream, partitions))
    producer = factory.get_producer("log", config)
    producer.start()
    for index in range(messages):
        value = orjson.dumps({"user": f"u{index % 1000}", "page": f"/page/{index % 97}", "n": index, "pad": "x" * 40})
        producer.send("bench", OutgoingMessageEnvelope(STREAM, value, b"k%d" % index, partition=index % partitions))
    producer.flush("bench")
    producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="millstream-bench-"))
    try:
        values = {
            "job.name": "bench",
            "systems.log.path": str(root / "log"),
            "systems.log.samza.msg.serde": "json",
            "systems.log.samza.key.serde": "string",
        }
        config = Config(values)
        write_json(config, args.partitions, args.messages)
        config_file = root / "job.yaml"
        config_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        raw = max(raw_read_rate(root / "log", STREAM.stream, args.partitions) for _ in range(args.runs))
        print(f"{args.messages:,} JSON records over {args.partitions} partitions")
        print(f"{'raw read (log consumer)':<26}{raw:>12,.0f} records/s  {1:>6.0%}")
        spark = build_session(Config({}), master=f"local[{args.partitions}]")
        register(spark)
        for name, raw_option in (("DataFrame raw (Arrow)", "true"), ("DataFrame json (Arrow)", "false")):
            df = spark.read.format("millstream").option("config", str(config_file)).option("stream", str(STREAM))
            query = df.option("raw", raw_option).load().agg(functions.sum(functions.length("value")))
            query.collect()
            best = 0.0
            for _ in range(args.runs):
                started = time.perf_counter()
                query.collect()
                best = max(best, args.messages / (time.perf_counter() - started))
            print(f"{name:<26}{best:>12,.0f} records/s  {best / raw:>6.0%} of raw read")
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
