"""A superseded attempt of a container that keeps running (a zombie) writes nothing a newer attempt's
checkpoints cover: its changelog appends are refused once the newer attempt claimed the partition, so a
restore from the newer attempt's checkpoint gives exactly the counts of a fault-free run."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import FencedError
from millstream.contracts.systems import WriterFencedError
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.prepare import prepare
from millstream.job_model import JobModel
from millstream.model import SystemStream, SystemStreamPartition, TaskName
from millstream.runtime.container import Container, ContainerResult
from millstream.testing import read_stream, write_stream
from tests.helpers import create_stream, seal, wait_until
from tests.storage.harness import state_config

TASK = TaskName("Partition 0")
INPUT = SystemStreamPartition("log", "in", 0)
KEYS = 10


def zombie_job(tmp_path: Path, factory: str, records: int, hold_at: int, commit_at: int, **extra: Any) -> Settings:
    hold = tmp_path / "hold"
    hold.mkdir()
    config = prepare(
        state_config(
            tmp_path,
            "changelog",
            task="tests.storage.jobs:CountPerKeyHeldOnce",
            stores__counts__factory=factory,
            test__hold__dir=hold,
            test__hold__offset=hold_at,
            test__hold__commit__offset=commit_at,
            **extra,
        )
    )
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    write_keys(config, range(records))
    return config


def write_keys(config: Settings, values: range, key: str | None = None) -> None:
    pairs = [(key or f"k{value % KEYS}", value) for value in values]
    write_stream(config, SystemStream("log", "in"), pairs, partition=0)


def checkpointed_offset(config: Settings, task: TaskName = TASK, ssp: SystemStreamPartition = INPUT) -> int:
    with metadata_store(config) as store:
        reader = checkpoint_manager(config, store, None)
        reader.start()
        try:
            last = reader.read_last_checkpoint(task)
        finally:
            reader.stop()
    offset = last.offsets.get(ssp) if last is not None else None
    return int(offset) if offset is not None else -1


def in_background(
    config: Settings, model: JobModel, container_id: str = "0"
) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = Container(config, model, container_id).run()
        except BaseException as error:  # what ended the attempt is what the test checks
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def reported_stores(config: Settings) -> list[dict[str, int]]:
    """The whole store each attempt reported at end-of-stream, in order."""
    messages = read_stream(config, SystemStream("log", "out"))[0]
    return [value["store"] for _, value in messages if "store" in value]


def run_with_a_zombie(
    tmp_path: Path, factory: str, **extra: Any
) -> tuple[Settings, BaseException | None, ContainerResult]:
    """Attempt 1 is held at offset 100 of 200; attempt 2 starts, restores and processes everything; then
    attempt 1 goes on (behind attempt 2, so its counts are stale) and commits at offset 150; attempt 2
    commits later records; a third attempt restores from attempt 2's last checkpoint."""
    config = zombie_job(tmp_path, factory, records=200, hold_at=100, commit_at=150, **extra)
    with metadata_store(config) as store:
        model = JobCoordinator(config, store).start()
    zombie, zombie_outcome = in_background(config, model)
    wait_until(lambda: (tmp_path / "hold" / "held").exists(), 60, "attempt 1 held at offset 100")
    current, current_outcome = in_background(config, model)
    wait_until(lambda: checkpointed_offset(config) == 199 or not current.is_alive(), 60, "attempt 2 at offset 199")
    (tmp_path / "hold" / "release").touch()
    zombie.join(60)
    assert not zombie.is_alive(), "the zombie attempt did not stop"
    write_keys(config, range(200, 205), key="late")
    wait_until(lambda: checkpointed_offset(config) == 204 or not current.is_alive(), 60, "attempt 2 at offset 204")
    seal(config, "in")
    current.join(60)
    assert current_outcome.get("result") is not None, current_outcome.get("error")
    assert current_outcome["result"].outcome == "finished"
    restored = Container(config, model, "0").run()
    return config, zombie_outcome.get("error"), restored


def test_a_zombie_attempt_is_fenced_before_its_changelog_writes_land_and_a_restore_gives_exact_counts(
    tmp_path: Path,
) -> None:
    config, zombie_error, restored = run_with_a_zombie(tmp_path, "inmemory")
    expected = Counter(f"k{value % KEYS}" for value in range(200)) | Counter({"late": 5})
    assert restored.outcome == "finished" and restored.epoch == 3
    *_, restored_store = reported_stores(config)
    assert restored_store == dict(expected)
    assert isinstance(zombie_error, WriterFencedError), zombie_error
    # fenced at whichever write of its commit came first (output is flushed before the changelog)
    assert "partition 0: container 0 attempt 1 of generation" in str(zombie_error)
    assert "a newer attempt owns its writes" in str(zombie_error)


def test_a_zombie_with_a_rocksdb_store_never_touches_the_newer_attempts_directories(tmp_path: Path) -> None:
    config, zombie_error, _ = run_with_a_zombie(tmp_path, "rocksdb")
    expected = Counter(f"k{value % KEYS}" for value in range(200)) | Counter({"late": 5})
    assert isinstance(zombie_error, FencedError), zombie_error
    *_, restored_store = reported_stores(config)
    assert restored_store == dict(expected)
    task_dirs = sorted(path.name for path in (tmp_path / "jobs" / "test-1" / "stores" / "logged" / "counts").iterdir())
    attempts = [name for name in task_dirs if "@" in name and name != "Partition_0@owner"]
    assert attempts == ["Partition_0@1.3"], task_dirs  # the owner deleted the older attempts' directories


def test_a_fenced_zombies_last_status_report_never_replaces_the_live_attempts(tmp_path: Path) -> None:
    """Attempt 1 is held (a partitioned host), attempt 2 takes over and runs; when attempt 1 wakes, is fenced and
    reports itself failed, the container's status still shows attempt 2 running, as every view reads it."""
    config = zombie_job(tmp_path, "inmemory", records=200, hold_at=100, commit_at=150)
    with metadata_store(config) as store:
        model = JobCoordinator(config, store).start()
    zombie, zombie_outcome = in_background(config, model)
    wait_until(lambda: (tmp_path / "hold" / "held").exists(), 60, "attempt 1 held at offset 100")
    current, current_outcome = in_background(config, model)
    wait_until(lambda: checkpointed_offset(config) == 199 or not current.is_alive(), 60, "attempt 2 at offset 199")
    (tmp_path / "hold" / "release").touch()
    zombie.join(60)
    assert not zombie.is_alive(), "the zombie attempt did not stop"
    assert isinstance(zombie_outcome.get("error"), FencedError), zombie_outcome
    with metadata_store(config) as store:
        status = coordination.container_statuses(store)["0"]
    assert (status["state"], status["attempt"], status["generation"]) == ("running", 2, model.generation), status
    seal(config, "in")
    current.join(60)
    assert current_outcome.get("result") is not None, current_outcome.get("error")
    with metadata_store(config) as store:
        status = coordination.container_statuses(store)["0"]
    assert (status["state"], status["attempt"]) == ("finished", 2), status
