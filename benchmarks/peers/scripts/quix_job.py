"""Quix Streams (3.28): a StreamingDataFrame over the input topic, bytes in and out; W2 counts in its
default state (RocksDB with changelog topics). ``Application.run(count=N)`` stops it after N outputs."""

from __future__ import annotations

import os

from common import parse_args
from quixstreams import Application, State


def count(_value: bytes, state: State) -> bytes:
    new = state.get("count", 0) + 1
    state.set("count", new)
    return b"%d" % new


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
        frame = frame.apply(count, stateful=True)
    frame.to_topic(sink)
    app.run(count=args.messages, collect=False)


if __name__ == "__main__":
    main()
