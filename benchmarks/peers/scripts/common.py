"""The arguments every contender script takes; imported by the scripts only (each runs in its own venv,
so nothing here may import millstream or a peer framework)."""

from __future__ import annotations

import argparse


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--workload", choices=["w1", "w2"], required=True)
    parser.add_argument("--messages", type=int, default=0, help="messages in the input topic (not with --follow)")
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--workdir", required=True, help="an empty directory for state and checkpoints")
    parser.add_argument("--name", required=True, help="unique per run: consumer group / application id")
    parser.add_argument("--containers", type=int, default=1)
    parser.add_argument(
        "--follow",
        action="store_true",
        help="the latency mode (benchmarks/latency.py): run until SIGTERM, taking records sent while it runs; "
        "W2 sends b'<count>,' + the input value, so the reader gets the send time off the value",
    )
    args = parser.parse_args()
    if not args.follow and args.messages <= 0:
        parser.error("--messages is required (a positive count) unless --follow")
    return args


def w2_value(count: int, value: bytes, follow: bool) -> bytes:
    """W2's output value: the count (the throughput run verifies it), then the input value under ``--follow``."""
    return b"%d,%s" % (count, value) if follow else b"%d" % count
