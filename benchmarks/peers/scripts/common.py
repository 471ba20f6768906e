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
    parser.add_argument("--messages", type=int, required=True, help="messages in the input topic")
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--workdir", required=True, help="an empty directory for state and checkpoints")
    parser.add_argument("--name", required=True, help="unique per run: consumer group / application id")
    parser.add_argument("--containers", type=int, default=1)
    return parser.parse_args()
