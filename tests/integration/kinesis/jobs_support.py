"""What the Kinesis job tests share: a job config, a load generator, and the checks on the job's output."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson

from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.model import SystemStream
from millstream.testing import read_stream
from tests.helpers import create_stream as create_log_stream
from tests.integration.kinesis.helpers import SYSTEM, kinesis_values, raw_client


def job_config(endpoint: str, data_dir: Path, stream: str, **extra: Any) -> Settings:
    """A job reading ``kinesis.<stream>`` with ``RecordOrigin`` into ``log.out`` (created here)."""
    values = kinesis_values(endpoint)
    values.update(
        {
            "job.name": "kinesis-job",
            "job.data.dir": str(data_dir),
            "task.class": "tests.integration.kinesis.jobs:RecordOrigin",
            "task.inputs": f"{SYSTEM}.{stream}",
            "task.commit.ms": "200",
            f"systems.{SYSTEM}.samza.key.serde": "string",
            f"systems.{SYSTEM}.samza.msg.serde": "json",
            f"systems.{SYSTEM}.samza.offset.default": "oldest",
            "systems.log.samza.key.serde": "string",
            "systems.log.samza.msg.serde": "json",
        }
    )
    values.update({key.replace("__", "."): str(value) for key, value in extra.items()})
    config = prepare(Settings(values))
    create_log_stream(config, "out", 1)
    return config


class Loader:
    """Writes ``{"n": i}`` records under keys ``k0..k<keys-1>`` in rounds (one record per key per
    PutRecords call, so each key's records are written in order) until stopped."""

    def __init__(self, endpoint: str, stream: str, keys: int = 16, pause: float = 0.02) -> None:
        self.client = raw_client(endpoint)
        self.stream = stream
        self.keys = keys
        self.pause = pause
        self.written: dict[str, list[int]] = defaultdict(list)
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def write_round(self) -> None:
        batch: list[tuple[str, int]] = []
        for index in range(self.keys):
            batch.append((f"k{index}", self.count))
            self.count += 1
        response = self.client.put_records(
            StreamName=self.stream,
            Records=[{"PartitionKey": key, "Data": orjson.dumps({"n": n})} for key, n in batch],
        )
        assert response["FailedRecordCount"] == 0
        for key, n in batch:
            self.written[key].append(n)

    def write(self, rounds: int) -> None:
        for _ in range(rounds):
            self.write_round()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.write_round()
            self._stop.wait(self.pause)

    def start(self) -> Loader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def all_written(self) -> set[tuple[str, int]]:
        return {(key, n) for key, ns in self.written.items() for n in ns}


def output(config: Settings) -> list[dict[str, Any]]:
    """Every record ``RecordOrigin`` wrote, in the order it was written (duplicates included)."""
    return [value for _, value in read_stream(config, SystemStream("log", "out")).get(0, [])]


def seen(config: Settings) -> set[tuple[str, int]]:
    return {(record["key"], record["n"]) for record in output(config)}


def check_key_order(records: list[dict[str, Any]], written: dict[str, list[int]]) -> None:
    """Each key's records were first processed in the order they were written (re-deliveries allowed)."""
    first: dict[str, list[int]] = defaultdict(list)
    done: set[tuple[str, int]] = set()
    for record in records:
        item = (record["key"], record["n"])
        if item not in done:
            done.add(item)
            first[record["key"]].append(record["n"])
    for key, ns in written.items():
        assert first[key] == ns, f"key {key}: processed {first[key][:20]}..., written {ns[:20]}..."


def check_parents_before_children(records: list[dict[str, Any]], lineage: dict[str, tuple[str, ...]]) -> int:
    """Every record of a parent shard was first processed before any record of its children.

    Returns how many (parent, child) pairs had records on both sides (the check is vacuous otherwise).
    """
    first_index: dict[str, int] = {}
    last_first: dict[str, int] = {}
    done: set[tuple[str, int]] = set()
    for index, record in enumerate(records):
        item = (record["key"], record["n"])
        shard = record["shard"]
        first_index.setdefault(shard, index)
        if item not in done:
            done.add(item)
            last_first[shard] = index
    pairs = 0
    for child, parents in lineage.items():
        for parent in parents:
            if parent in last_first and child in first_index:
                pairs += 1
                assert last_first[parent] < first_index[child], f"{child} was read before {parent} was finished"
    return pairs


def wait_until(probe: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(interval)
