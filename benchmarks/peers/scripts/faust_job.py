"""Faust (faust-streaming 0.15): one worker, an agent over the input topic; W2 counts in a Table (its
default store, memory, with its changelog topic: Faust's durable state). The agent stops the worker
with SIGTERM, as an operator would, once it has seen every message.

``--follow`` (the latency benchmark): no count, the worker runs until SIGTERM; Faust's defaults otherwise (its
aiokafka producer and consumer settings, a commit every 2.8 s) but for ``consumer_auto_offset_reset="earliest"``,
as above: the benchmark's first records are sent before the consumer joins, and the ``raw`` serializer for
keys and values (they are not JSON there)."""

from __future__ import annotations

import os
import signal

import faust
from common import parse_args, w2_value


def main() -> None:
    args = parse_args()
    app = faust.App(
        args.name,
        broker=f"kafka://{args.bootstrap}",
        datadir=os.path.join(args.workdir, "faust"),
        topic_partitions=args.partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        web_enabled=False,
    )
    raw = {"key_serializer": "raw", "value_serializer": "raw"} if args.follow else {}  # values are not JSON there
    source = app.topic(args.input, key_type=bytes, value_type=bytes, partitions=args.partitions, **raw)
    sink = app.topic(args.output, key_type=bytes, value_type=bytes, partitions=args.partitions, **raw)
    counts = app.Table("counts", default=int, key_type=bytes, value_type=int, partitions=args.partitions)
    seen = 0

    def one_more() -> None:
        nonlocal seen
        seen += 1
        if seen == args.messages and not args.follow:
            os.kill(os.getpid(), signal.SIGTERM)

    if args.workload == "w1":

        @app.agent(source)
        async def copy(stream: faust.StreamT) -> None:
            async for event in stream.events():
                await sink.send(key=event.key, value=event.value)
                one_more()
    else:

        @app.agent(source)
        async def count(stream: faust.StreamT) -> None:
            async for event in stream.events():
                counts[event.key] += 1
                await sink.send(key=event.key, value=w2_value(counts[event.key], event.value, args.follow))
                one_more()

    faust.Worker(app, loglevel="warning").execute_from_commandline()


if __name__ == "__main__":
    main()
