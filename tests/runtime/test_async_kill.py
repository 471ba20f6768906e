"""An ``AsyncStreamTask`` job SIGKILLed with hundreds of calls in flight loses nothing: its checkpoints never
passed a message whose output was not written, and the restart produces every output, the messages up to
the last checkpoint exactly once (at-least-once, replaying only what followed it)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import yaml

from millstream.config.settings import Settings
from millstream.coordinator.prepare import load_job_config
from millstream.model import SystemStream
from millstream.testing import read_stream, write_stream
from tests.cli.test_main import millstream, start_job, wait_for
from tests.helpers import create_stream, seal
from tests.http_service import EnrichService, ServiceSettings, enrich_service
from tests.runtime.test_async_tasks import checkpointed

PARTITIONS, PER_PARTITION = 2, 4000


ASYNC_ENRICH = {"job.name": "async-kill", "task.class": "tests.jobs:AsyncEnrich", "task.inputs": "log.in"}


def job_file(tmp_path: Path, url: str, job: dict[str, str] = ASYNC_ENRICH) -> Path:
    """A job file of ``job`` (its name and task or application) calling the service at ``url`` with 1,000
    messages in flight per task and a commit every 100 ms."""
    values = {
        **job,
        "job.data.dir": str(tmp_path / "data"),
        "task.commit.ms": 100,
        "task.max.concurrency": 1000,
        "test.service.url": url,
        "systems.log.samza.offset.default": "oldest",
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def outputs_by_partition(config) -> dict[int, Counter[int]]:
    counts: dict[int, Counter[int]] = {p: Counter() for p in range(PARTITIONS)}
    for pairs in read_stream(config, SystemStream("log", "out")).values():
        for _, value in pairs:
            counts[value["p"]][value["v"]] += 1
    return counts


def killed_with_calls_in_flight(
    path: Path, tmp_path: Path, config: Settings, service: EnrichService, at_least: int = 300
) -> tuple[dict[int, int], int]:
    """Run the job file ``path`` as ``millstream run --in-process`` and SIGKILL it once ``at_least`` calls are in
    flight at ``service`` and a checkpoint was written: the checkpointed offset per partition, and the calls in
    flight at the kill."""
    job, _, stderr = start_job(path, tmp_path / "first", "--in-process")
    try:
        wait_for(
            lambda: service.counts.in_flight >= at_least and any(o is not None for o in checkpointed(config).values()),
            timeout=120,
            process=job,
            log=stderr,
        )
        in_flight = service.counts.in_flight
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    return {p: int(offset) for p, offset in checkpointed(config).items() if offset is not None}, in_flight


def test_a_sigkill_with_hundreds_of_calls_in_flight_loses_nothing_and_replays_only_past_the_checkpoint(tmp_path):
    with enrich_service(ServiceSettings(latency=(0.1, 0.4))) as service:
        path = job_file(tmp_path, service.url)
        config = load_job_config(path)
        create_stream(config, "in", PARTITIONS)
        create_stream(config, "out", 1)
        for partition in range(PARTITIONS):
            values = [(f"k{i % 50}", i) for i in range(PER_PARTITION)]
            write_stream(config, SystemStream("log", "in"), values, partition=partition)
        seal(config, "in")

        committed, in_flight_at_kill = killed_with_calls_in_flight(path, tmp_path, config, service)
        before = outputs_by_partition(config)
        assert in_flight_at_kill >= 300, "hundreds of calls were in flight when the job was killed"
        for partition, offset in committed.items():
            missing = [v for v in range(offset + 1) if before[partition][v] == 0]
            assert missing == [], f"partition {partition} checkpointed {offset} before the output of {missing[:5]}"
        assert sum(sum(c.values()) for c in before.values()) < PARTITIONS * PER_PARTITION, "the kill came too late"

        service.settings.latency = 0.0
        rerun = millstream("run", "--in-process", path, timeout=180)
        assert rerun.returncode == 0, rerun.stderr
    after = outputs_by_partition(config)
    for partition in range(PARTITIONS):
        assert set(after[partition]) == set(range(PER_PARTITION)), "nothing lost"
        last = committed.get(partition, -1)
        assert all(after[partition][v] == 1 for v in range(last + 1)), "nothing up to the checkpoint twice"
    assert checkpointed(config) == {p: str(PER_PARTITION - 1) for p in range(PARTITIONS)}
