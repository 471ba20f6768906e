"""Stateful jobs through the Spark runner, with a container SIGKILLed at each point of the commit flow:
during processing, during an upload, between the upload and the checkpoint write, and between the
checkpoint write and the cleanup. After Spark's retry restores the stores, the job must end with
every store equal to a reference computed without faults (nothing applied twice, nothing lost), the
stores restorable on a new host from the last checkpoint, no orphaned blob left, and every input
message's output present at least once."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.checkpoint import CheckpointV2
from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream, TaskName
from millstream.spark.run.runner import SparkJobRunner
from millstream.storage.backends.blobstore.index import SnapshotIndex
from millstream.storage.backends.registry import state_backend_factory_class
from millstream.storage.changelog_partitions import changelog_partitions
from millstream.testing import read_stream, write_stream
from tests.helpers import create_stream, seal
from tests.spark.run.test_runner import wait_for
from tests.storage.harness import restored_contents, state_config

pytestmark = pytest.mark.spark

PARTITIONS = 4
PER_PARTITION = 400
KEYS = 7
BLOB_MARKER_KEY = state_backend_factory_class("blobstore", "test").marker_key()


def job(tmp_path: Path, backend: str, **extra: Any) -> Settings:
    config = state_config(
        tmp_path,
        backend,
        task="tests.storage.jobs:CountPerKeyReportingAtEnd",
        **{"job__container__count": 2, "task__commit__ms": 250, "test__delay__seconds": 0.003, **extra},
    )
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", 1)
    for partition in range(PARTITIONS):
        messages = [(f"key{i % KEYS}", partition * 100_000 + i) for i in range(PER_PARTITION)]
        write_stream(config, SystemStream("log", "in"), messages, partition=partition)
    seal(config, "in")
    return config


def reference() -> dict[str, dict[str, int]]:
    """Per task, the count of every key: what the stores hold after a run without faults."""
    return {f"Partition {p}": dict(Counter(f"key{i % KEYS}" for i in range(PER_PARTITION))) for p in range(PARTITIONS)}


def run_and_kill(config: Settings, spark: Any, victim: Any) -> JobResult:
    """Run the job on Spark; ``victim()`` returns a pid to SIGKILL (once) as soon as it knows one."""
    runner = SparkJobRunner(config, spark=spark)
    outcome: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()))
    thread.start()
    pid = wait_for(victim, timeout=120)
    os.kill(pid, signal.SIGKILL)
    thread.join(300)
    assert not thread.is_alive(), "the job did not end after the kill"
    return outcome["result"]


def final_store_dumps(config: Settings) -> dict[str, dict[str, int]]:
    """The last ``{"store": ...}`` each task sent at end-of-stream (an earlier attempt may have sent one)."""
    dumps: dict[str, dict[str, int]] = {}
    for _, value in read_stream(config, SystemStream("log", "out"))[0]:
        if "store" in value:
            dumps[value["task"]] = value["store"]
    return dumps


def check_outcome(config: Settings, result: JobResult, tmp_path: Path, backend: str) -> None:
    assert result.outcome == "finished", result.error
    assert max(c.epoch for c in result.containers) >= 2, "no container was retried"
    assert final_store_dumps(config) == reference()
    outputs = [v for _, v in read_stream(config, SystemStream("log", "out"))[0] if "store" not in v]
    assert {(v["p"], v["v"]) for v in outputs} == {
        (p, p * 100_000 + i) for p in range(PARTITIONS) for i in range(PER_PARTITION)
    }  # at least once: every input's output is there (some twice, from before the kill)
    for task, counts in reference().items():
        assert restored_contents(config, TaskName(task), tmp_path / f"new-host-{task}") == counts
    if backend in ("blobstore", "both"):
        assert_no_orphaned_blobs(config)


def assert_no_orphaned_blobs(config: Settings) -> None:
    root = Path(config["job.data.dir"]) / "blobs"
    present = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
    referenced: set[str] = set()
    for checkpoint in checkpoint_manager(config, metadata_store(config)).read_all().values():
        assert isinstance(checkpoint, CheckpointV2)
        index_blob = checkpoint.state_checkpoint_markers[BLOB_MARKER_KEY]["counts"]
        index = SnapshotIndex.from_bytes((root / index_blob).read_bytes(), index_blob)
        referenced |= {index_blob, *index.dir_index.blobs_present()}
    assert present == referenced


def running_container_with_a_checkpoint(config: Settings) -> Any:
    store = metadata_store(config)

    def probe() -> int | None:
        checkpoints = checkpoint_manager(config, store).read_all()
        status = coordination.container_statuses(store).get("0", {})
        task = TaskName("Partition 0")
        if status.get("state") == "running" and task in checkpoints and checkpoints[task].offsets:
            return int(status["pid"])
        return None

    return probe


def paused_at(marker_dir: Path, point: str) -> Any:
    def probe() -> int | None:
        marker = marker_dir / point
        if marker.is_file() and (text := marker.read_text().strip()):
            time.sleep(0.2)  # well inside the pause
            return int(text)
        return None

    return probe


@pytest.mark.parametrize("backend", ["changelog", "blobstore"])
def test_sigkill_during_processing(spark_local, tmp_path: Path, backend: str) -> None:
    config = job(tmp_path, backend)
    result = run_and_kill(config, spark_local, running_container_with_a_checkpoint(config))
    check_outcome(config, result, tmp_path, backend)


def test_sigkill_during_processing_with_an_object_cache_smaller_than_the_keys(spark_local, tmp_path: Path) -> None:
    """Evictions write back between commits, so the changelog runs ahead of the checkpoint when the kill comes:
    the restore reverts to the checkpoint and the end equals a run without faults. The retry starts from no
    local state (``clean.on.container.start``), so it replays each store's whole changelog, the embedded log
    hands it every record in bulk, and each store, empty when its replay starts, takes its records through a
    vector memtable from the first batch whose keys are out of order (a changelog whose keys all came in order,
    a task killed after a few, stays in the normal memtable): the retried container's metrics say so."""
    config = job(
        tmp_path,
        "changelog",
        stores__counts__object__cache__size=3,
        stores__counts__write__batch__size=2,
        stores__counts__clean__on__container__start="true",
        metrics__reporters="snapshot",
        metrics__reporter__snapshot__stream="log.metrics",
        metrics__snapshot__interval__ms=100,
    )
    create_stream(config, "metrics", 1)
    result = run_and_kill(config, spark_local, running_container_with_a_checkpoint(config))
    check_outcome(config, result, tmp_path, "changelog")
    replayed = restored_records_of_the_retry(config, "0")
    assert sum(records for records, _, _ in replayed.values()) > 0
    assert all(records == bulk for records, bulk, _ in replayed.values()), replayed
    for task, (records, _, vector) in replayed.items():
        ascending = changelog_keys_ascending(config, task, int(records))
        assert (vector == 0) if ascending else (0 < vector <= records), (task, replayed)


def changelog_keys_ascending(config: Settings, task: str, records: int) -> bool:
    """Whether the first ``records`` keys of ``task``'s changelog partition are in ascending order."""
    partition = changelog_partitions(metadata_store(config))[TaskName(task)]
    keys = [key for key, _ in read_stream(config, SystemStream("log", "counts-changelog"))[partition][:records]]
    return all(first < second for first, second in pairwise(keys))


RESTORE_GAUGES = ("store_restored_records", "store_restored_bulk_records", "store_restored_vector_memtable_records")


def restored_records_of_the_retry(config: Settings, container: str) -> dict[str, tuple[float, ...]]:
    """Per task of ``container``'s last attempt: the records its store's restore replayed, how many of them
    came in bulk and how many went through a vector memtable, from the last metrics snapshot that attempt
    sent."""
    last: dict[str, Any] = {}
    for _, document in read_stream(config, SystemStream("log", "metrics"))[0]:
        header = document["header"]
        if header["container-name"] == container and header["attempt"] >= 2:
            last = document
    assert last, f"no snapshot of a retry of container {container}"
    values: dict[tuple[str, str], float] = {
        (metric["labels"]["task"], metric["name"]): metric["value"]
        for metric in last["metrics"]
        if metric["name"] in RESTORE_GAUGES
    }
    tasks = {task for task, _ in values}
    return {t: tuple(values[(t, name)] for name in RESTORE_GAUGES) for t in tasks}


@pytest.mark.parametrize(
    ("point", "backend"),
    [
        ("mid-upload", "blobstore"),
        ("after-upload", "blobstore"),
        ("after-upload", "changelog"),
        ("after-checkpoint", "blobstore"),
    ],
)
def test_sigkill_at_a_commit_point(spark_local, tmp_path: Path, point: str, backend: str) -> None:
    markers = tmp_path / "markers"
    config = job(
        tmp_path,
        backend,
        task__commit__testing__pause__at=point,
        task__commit__testing__pause__ms=60_000,
        task__commit__testing__marker__dir=str(markers),
    )
    result = run_and_kill(config, spark_local, paused_at(markers, point))
    check_outcome(config, result, tmp_path, backend)


def output_grows_while_paused_at(config: Settings, marker_dir: Path, point: str) -> Any:
    """The pid of the container paused at ``point`` once its output has grown since the pause began: its
    tasks processed on while the commit was held there."""
    seen: dict[str, int] = {}

    def probe() -> int | None:
        marker = marker_dir / point
        if not (marker.is_file() and (text := marker.read_text().strip())):
            return None
        written = len(read_stream(config, SystemStream("log", "out"))[0])
        return int(text) if written > seen.setdefault("at pause", written) + 10 else None

    return probe


@pytest.mark.parametrize("backend", ["changelog", "blobstore"])
def test_a_container_processes_on_while_a_commit_snapshots_and_a_kill_there_restores_exact_state(
    spark_local, tmp_path: Path, backend: str
) -> None:
    """The snapshot runs on the commit thread (the stores have object caches): held there, the container's
    output keeps growing; SIGKILLed there, the retry restores the last checkpoint's state exactly."""
    markers = tmp_path / "markers"
    config = job(
        tmp_path,
        backend,
        job__container__count=1,
        task__commit__snapshot__beside__processing__enabled="true",
        task__commit__testing__pause__at="before-snapshot",
        task__commit__testing__pause__ms=120_000,
        task__commit__testing__marker__dir=str(markers),
    )
    result = run_and_kill(config, spark_local, output_grows_while_paused_at(config, markers, "before-snapshot"))
    check_outcome(config, result, tmp_path, backend)


def job_with_hourly_local_checkpoints(tmp_path: Path) -> Settings:
    """The changelog job committing every 50 ms with a local checkpoint every hour: after a task's first commit its
    commits make none; the checkpoints' ids (version 2) name the directories."""
    return job(
        tmp_path,
        "changelog",
        task__commit__ms=50,
        task__checkpoint__read__versions="2,1",
        stores__counts__local__checkpoint__interval__ms=3_600_000,
    )


def past_a_commit_without_a_local_checkpoint(config: Settings) -> Any:
    """The pid of container 0 once task ``Partition 0``'s last checkpoint names no local checkpoint directory
    of its store: a restore must start from an older directory and replay the changelog records after it."""
    store = metadata_store(config)
    data_dir = Path(config["job.data.dir"])

    def probe() -> int | None:
        checkpoint = checkpoint_manager(config, store).read_all().get(TaskName("Partition 0"))
        status = coordination.container_statuses(store).get("0", {})
        if status.get("state") != "running" or not isinstance(checkpoint, CheckpointV2) or not checkpoint.offsets:
            return None
        local = {path.name for path in data_dir.rglob("Partition_0-*") if path.is_dir()}
        if local and not any(name.endswith(f"-{checkpoint.checkpoint_id}") for name in local):
            return int(status["pid"])
        return None

    return probe


def test_sigkill_after_commits_that_made_no_local_checkpoint_replays_the_changelog_onto_an_older_one(
    spark_local, tmp_path: Path
) -> None:
    """A commit every 50 ms, a local checkpoint every hour: after its first commit a task's commits record the
    changelog's offset only. Killed then, the retry copies the older directory in, replays the changelog records
    after it and reverts those after the checkpoint; the end equals a run without faults."""
    config = job_with_hourly_local_checkpoints(tmp_path)
    result = run_and_kill(config, spark_local, past_a_commit_without_a_local_checkpoint(config))
    check_outcome(config, result, tmp_path, "changelog")


def test_a_job_that_ends_leaves_each_store_a_local_checkpoint_of_its_last_checkpoint(
    spark_local, tmp_path: Path
) -> None:
    """Local checkpoints every hour, commits every 50 ms: at its clean stop each container makes, for every store
    whose last commit made none, the local checkpoint of that commit, so a restart on this host replays nothing."""
    config = job_with_hourly_local_checkpoints(tmp_path)
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "finished", result.error
    assert final_store_dumps(config) == reference()
    checkpoints = checkpoint_manager(config, metadata_store(config)).read_all()
    data_dir = Path(config["job.data.dir"])
    for partition in range(PARTITIONS):
        checkpoint = checkpoints[TaskName(f"Partition {partition}")]
        assert isinstance(checkpoint, CheckpointV2)
        local = [path.name for path in data_dir.rglob(f"Partition_{partition}-*") if path.is_dir()]
        assert local == [f"Partition_{partition}-{checkpoint.checkpoint_id}"]
