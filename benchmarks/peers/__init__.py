"""The peer benchmark: millstream against the raw Kafka client and the other Python stream processors.

    python -m benchmarks.peers [--messages 1000000] [--keys 10000] [--runs 3] [--only NAME ...]

One Kafka broker (the test harness's), one 4-partition input topic of JSON messages of about 100 bytes
over ``--keys`` keys, and every contender one after another on that topic, in separate processes:
W1 copies every message to an output topic under the same key, W2 counts messages per key in durable
state and emits the new count per message. Each output is verified (count, per-key results) before its
figures count. ``docs/performance.md`` describes the method and holds the last table.
"""
