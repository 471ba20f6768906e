"""The limits: confluent-kafka alone. ``w1`` is the consume → produce copy loop (producer settings as
millstream's: idempotent, acks=all); ``--read-only`` consumes every message and does nothing, printing
its own steady window (wall-clock times of its 5 % and 95 % marks) (there is no output topic to read it off)."""

from __future__ import annotations

import json
import sys
import time

from common import parse_args
from confluent_kafka import Consumer, Producer, TopicPartition

CONSUMER = {"enable.auto.commit": False, "fetch.queue.backoff.ms": 10}


def main() -> None:
    read_only = "--read-only" in sys.argv
    if read_only:
        sys.argv.remove("--read-only")
    args = parse_args()
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.name, **CONSUMER})
    consumer.assign([TopicPartition(args.input, p, 0) for p in range(args.partitions)])
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "partitioner": "murmur2_random",
            "delivery.report.only.error": True,
        }
    )
    marks = {int(args.messages * 0.05): 0.0, int(args.messages * 0.95): 0.0}
    count = 0
    while count < args.messages:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is not None:
                continue
            count += 1
            if count in marks:
                marks[count] = time.time()
            if read_only:
                continue
            while True:
                try:
                    producer.produce(args.output, message.value(), message.key())
                    break
                except BufferError:
                    producer.poll(0.01)
    if producer.flush(120) != 0:
        raise SystemExit(f"{args.output}: messages still unsent after 120 s")
    consumer.close()
    first, last = sorted(marks)
    report = {
        "messages": count,
        "steady_messages": last - first,
        "steady_start": marks[first],
        "steady_end": marks[last],
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
