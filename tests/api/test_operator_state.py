"""Window state in the task's operator store, in-process: the metadata store holds no per-key state, and a
job SIGKILLed at each point of its commit restores its windows (from the changelog or the blob store) to
what a fault-free run computes."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.control.state import CONTROL_STATE_NAMESPACE
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import load_job_config
from millstream.model import SystemStream
from millstream.operators.stores import OPERATOR_STORE
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.api.apps import app_config, messages, reference_counts_per_partition
from tests.cli.test_main import millstream, start_job, wait_for
from tests.helpers import create_stream, seal, wait_until

IN = SystemStream("log", "in")


def open_window_job(tmp_path: Path, users: int) -> Settings:
    """One partition of ``users`` distinct users, all in the first window, which never closes (the input
    stays open): at every commit the window holds one accumulator per user."""
    config = app_config(tmp_path, "tests.api.apps:WindowedCount", task__commit__ms=100)
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    write_stream(config, IN, [("k", {"user": f"u{i}", "n": i, "ts": i % 5000}) for i in range(users)], partition=0)
    return config


def metadata_bytes(config: Settings) -> int:
    path = Path(config["job.data.dir"]) / "jobs" / "test-1" / "metadata.db"
    with sqlite3.connect(path) as connection:
        return int(connection.execute("SELECT COALESCE(SUM(LENGTH(value)), 0) FROM metadata").fetchone()[0])


def run_until_checkpointed(config: Settings, last_offset: int) -> JobResult:
    """Run the job until a checkpoint covers ``last_offset`` of the input, then stop it (it commits)."""
    runner = InProcessRunner(config)
    results: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: results.setdefault("result", runner.run(timeout=120)))
    thread.start()
    store = metadata_store(config)
    store.init()

    def covered() -> bool:
        checkpoint = checkpoint_manager(config, store).read_all().get("Partition 0")  # type: ignore[call-overload]
        offset = None if checkpoint is None else checkpoint.offsets.get(IN.partition(0))
        return offset is not None and int(offset) >= last_offset

    try:
        wait_until(covered, 90, "a checkpoint covered the input")
    finally:
        runner.request_stop()
        thread.join()
        store.close()
    return results["result"]


def test_the_metadata_store_holds_no_per_key_state(tmp_path):
    sizes = {}
    for users in (100, 10_000):
        config = open_window_job(tmp_path / str(users), users)
        assert run_until_checkpointed(config, users - 1).outcome == "stopped"
        sizes[users] = metadata_bytes(config)
    # a hundred times the keys: what grows is a few offsets' digits, not 9 900 accumulators (~30 B each)
    assert sizes[10_000] - sizes[100] < 2_000, sizes


PARTITIONS = 3
PER_PARTITION = 300


def job_file(tmp_path: Path, backend: str, **extra: Any) -> Path:
    values: dict[str, Any] = {
        "job.name": "test",
        "job.data.dir": str(tmp_path / "data"),
        "app.class": "tests.api.apps:SourceWindowedCount",
        "task.commit.ms": 150,
        "test.delay.seconds": 0.002,
        "systems.log.samza.offset.default": "oldest",
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
        **extra,
    }
    if backend == "blobstore":
        values.update({"stores.backup.factories": "blobstore", "task.checkpoint.read.versions": "2,1"})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    return path


def windowed_output(config: Settings) -> dict[tuple[str, int], set[int]]:
    """Every count each window ever emitted (a pane may come out twice after a crash, never differently)."""
    panes: dict[tuple[str, int], set[int]] = {}
    for pairs in read_stream(config, SystemStream("log", "out")).values():
        for _, record in pairs:
            if "count" in record:
                panes.setdefault((record["user"], record["start"]), set()).add(record["count"])
    return panes


@pytest.mark.parametrize(
    ("point", "backend"),
    [("after-snapshot", "changelog"), ("after-upload", "blobstore"), ("after-checkpoint", "changelog")],
)
def test_windows_after_a_sigkill_at_a_commit_point_equal_a_plain_python_reference(tmp_path, point, backend):
    markers = tmp_path / "markers"
    path = job_file(
        tmp_path,
        backend,
        **{
            "task.commit.testing.pause.at": point,
            "task.commit.testing.pause.ms": 60_000,
            "task.commit.testing.marker.dir": str(markers),
        },
    )
    config = load_job_config(path)
    data = {p: messages(p, PER_PARTITION, users=40) for p in range(PARTITIONS)}
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", 1)
    for partition, pairs in data.items():
        write_stream(config, IN, pairs, partition=partition)
    seal(config, "in")

    job, _, stderr = start_job(path, tmp_path / "first", "--in-process")
    try:
        wait_for(lambda: (markers / point).is_file(), timeout=90, process=job, log=stderr)
        wait_until(lambda: bool((markers / point).read_text().strip()), 10, "the pause marker holds a pid")
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert windowed_output(config) != {key: {count} for key, count in reference_counts_per_partition(data).items()}, (
        "the kill came after the job had finished"
    )

    rerun = millstream("run", "--in-process", path, timeout=180)
    assert rerun.returncode == 0, rerun.stderr
    assert windowed_output(config) == {key: {count} for key, count in reference_counts_per_partition(data).items()}
    store = metadata_store(config)
    store.init()
    try:
        assert store.all(CONTROL_STATE_NAMESPACE) == {}, "the control state lives in the operator store"
    finally:
        store.close()
    assert any(path.name == OPERATOR_STORE for path in (tmp_path / "data" / "jobs").rglob("*"))
