"""Quix Streams (3.28): a StreamingDataFrame over the input topic, bytes in and out; W2 counts in its
default state (RocksDB with changelog topics). ``Application.run(count=N)`` stops it after N outputs.

``--follow`` (the latency benchmark): ``Application.run()`` without a count, until SIGTERM (Quix stops gracefully
on it); Quix's defaults otherwise (at-least-once, a commit every 5 s, its producer and consumer settings) but for
``auto_offset_reset="earliest"``, as above: the benchmark's first records are sent before the consumer joins."""

from __future__ import annotations

import os
from functools import partial

from common import parse_args, w2_value
from quixstreams import Application, State


def count(follow: bool, value: bytes, state: State) -> bytes:
    new = state.get("count", 0) + 1
    state.set("count", new)
    return w2_value(new, value, follow)


def main() -> None:
    args = parse_args()
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.name,
        auto_offset_reset="earliest",
        state_dir=os.path.join(args.workdir, "state"),
        loglevel="WARNING",
    )
    source = app.topic(args.input, key_deserializer="bytes", value_deserializer="bytes")
    sink = app.topic(args.output, key_serializer="bytes", value_serializer="bytes")
    frame = app.dataframe(source)
    if args.workload == "w2":
        frame = frame.apply(partial(count, args.follow), stateful=True)
    frame.to_topic(sink)
    if args.follow:
        app.run()
    else:
        app.run(count=args.messages, collect=False)


if __name__ == "__main__":
    main()
