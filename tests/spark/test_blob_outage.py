"""A blob store that stops answering in the middle of a stateful job on the Spark runner, with async commit.

The S3 server (moto, our own instance) is stopped with SIGSTOP and started again with SIGCONT, which is
what an unreachable store looks like to a client: connections hang instead of being refused, and
nothing is lost on the server. While it is stopped the upload in flight cannot end, so the next commits
are skipped (``task.commit.max.delay.ms`` has not passed) and then blocked; once it answers again the
upload ends and commits resume. The job must end exit 0 with exact results, restorable on a new host.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts.blobstore import blob_store
from millstream.contracts.metrics_snapshot import read_snapshots
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.model import TaskName
from millstream.spark.run.runner import SparkJobRunner
from tests.helpers import create_stream, fill, seal, wait_until
from tests.integration.blob_emulators import MotoS3Server
from tests.spark.test_state import final_store_dumps
from tests.storage.harness import restored_contents, state_config

pytestmark = pytest.mark.spark

OUTAGE_SECONDS = 5.0
"""How long the store stays unreachable: well past ``task.commit.max.delay.ms`` (1 s), so commits are
first skipped, then blocked, for most of it."""


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[MotoS3Server]:
    server = MotoS3Server(tmp_path / "moto").start()
    try:
        yield server
    finally:
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGCONT)  # never leave a stopped process behind
        server.stop()


def outage_job(tmp_path: Path, server: MotoS3Server) -> Settings:
    config = state_config(
        tmp_path,
        "blobstore",
        task="tests.storage.jobs:CountPerKeyReportingAtEnd",
        job__container__count=1,
        task__commit__ms=200,
        task__commit__max__delay__ms=1000,
        test__delay__seconds=0.002,
        metrics__enabled="true",
        metrics__snapshot__interval__ms=200,
        blob__store__manager__factory="s3",
        blob__store__s3__bucket="outage",
        blob__store__s3__endpoint__url=server.endpoint_url,
        sensitive__blob__store__s3__access__key__id="testing",
        sensitive__blob__store__s3__secret__access__key="testing",
    )
    blob_store(prepare(config)).create()
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    return config


def commit_counter(config: Settings, name: str) -> float:
    """The container's ``name`` counter summed over its tasks, as its last metrics snapshot reported it."""
    with metadata_store(config) as store:
        snapshots = read_snapshots(store)
    return sum(s.value for snapshot in snapshots.values() for s in snapshot.samples if s.name == name)


def checkpointed(config: Settings) -> int:
    """Input messages the tasks' checkpoints cover."""
    with metadata_store(config) as store:
        checkpoints = checkpoint_manager(config, store).read_all()
    return sum(
        int(o) + 1 for c in checkpoints.values() for ssp, o in c.offsets.items() if ssp.stream == "in" and o is not None
    )


def test_an_unreachable_blob_store_skips_then_blocks_commits_which_resume_and_the_job_ends_exact(
    spark_local: Any, tmp_path: Path, s3: MotoS3Server
) -> None:
    config = outage_job(tmp_path, s3)
    written = fill(config, "in", 2, 200)  # unsealed: the job runs until the input is sealed after the outage
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    job.start()
    assert s3.process is not None
    try:
        wait_until(lambda: checkpointed(config) > 0, 120, "no checkpoint before the outage")
        os.kill(s3.process.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        written |= fill(config, "in", 2, 300, start=200)  # work for the commits the outage holds up
        wait_until(lambda: commit_counter(config, "commits_skipped") > 0, 60, "no commit was skipped")
        wait_until(lambda: commit_counter(config, "commits_blocked") > 0, 60, "no commit blocked")
        during = checkpointed(config)
        time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - stopped)))  # the outage's length, not a wait
        assert checkpointed(config) == during, "a checkpoint was written while the store was unreachable"
        os.kill(s3.process.pid, signal.SIGCONT)
        resumed = time.monotonic()
        wait_until(lambda: checkpointed(config) > during, 120, "commits did not resume after the outage")
        recovery = time.monotonic() - resumed
        written |= fill(config, "in", 2, 50, start=500)
        seal(config, "in")
        job.join(300)
    finally:
        os.kill(s3.process.pid, signal.SIGCONT)
        if job.is_alive():
            runner.request_stop()
            job.join(120)
    result = outcome["result"]
    assert result.outcome == "finished", result.error
    assert recovery < 30, f"commits resumed {recovery:.1f}s after the store answered again"
    expected = {f"Partition {p}": dict(Counter(f"k{p}" for q, _ in written if q == p)) for p in range(2)}
    assert final_store_dumps(config) == expected
    for p in range(2):
        restored = restored_contents(config, TaskName(f"Partition {p}"), tmp_path / f"new-host-{p}")
        assert restored == expected[f"Partition {p}"]
