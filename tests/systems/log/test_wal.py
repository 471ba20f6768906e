"""WAL checkpoints off the appending thread: asked for every ``WAL_CHECKPOINT_BYTES``, run on a connection
of their own, finished by the appender so that the WAL starts over, and harmless when they fail."""

from __future__ import annotations

import logging
import multiprocessing
import sqlite3
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from millstream.systems.log import storage
from millstream.systems.log.storage import PAGE_SIZE, LogPartition
from millstream.systems.log.wal import WAL_BACKSTOP_BYTES, checkpoint_in_background

VALUE = b"v" * 2000
PER_APPEND = 8
"""Records per append: about 16 KB of payload."""


@pytest.fixture
def partition(tmp_path: Path) -> Iterator[LogPartition]:
    log = LogPartition(tmp_path / "p0.db", "events", 0, create=True)
    yield log
    log.close()


class Held(NamedTuple):
    path: Path
    fsync: bool
    done: Future[None]

    def run(self) -> None:
        """The checkpoint, for real, now; reported done."""
        checkpoint_in_background(self.path, self.fsync).result(timeout=30)
        self.done.set_result(None)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Held]:
    """The checkpoints partitions ask for, in order, each run when the test says."""
    held: list[Held] = []

    def hold(path: Path, fsync: bool) -> Future[None]:
        held.append(Held(path, fsync, Future()))
        return held[-1].done

    monkeypatch.setattr(storage, "checkpoint_in_background", hold)
    return held


def append(log: LogPartition, times: int = 1) -> None:
    for _ in range(times):
        log.append([(1_000, None, VALUE, None)] * PER_APPEND)


def wal_size(path: Path) -> int:
    return path.with_name(path.name + "-wal").stat().st_size


def test_a_background_checkpoint_copies_the_wal_into_the_partition_file(partition: LogPartition) -> None:
    append(partition, 64)  # about 1 MB, far below the threshold: only the WAL holds it
    assert partition.path.stat().st_size < 100_000
    checkpoint_in_background(partition.path, False).result(timeout=30)
    assert partition.path.stat().st_size > 64 * PER_APPEND * len(VALUE)
    assert len(partition.read(0, 10_000).values) == 64 * PER_APPEND  # type: ignore[union-attr]


def test_an_appender_asks_for_a_checkpoint_every_wal_checkpoint_bytes(
    partition: LogPartition, started: list[Held], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(storage, "WAL_CHECKPOINT_BYTES", 100 * PER_APPEND * len(VALUE))
    append(partition, 99)
    assert started == []
    append(partition)
    assert len(started) == 1
    append(partition, 20)  # none while the checkpoint runs
    assert len(started) == 1
    started[0].run()
    append(partition)  # finishes the checkpoint
    append(partition, 99)  # counted from zero again
    assert len(started) == 1
    append(partition)
    assert len(started) == 2


def test_the_appender_finishes_each_checkpoint_so_the_wal_starts_over_instead_of_growing(
    partition: LogPartition, started: list[Held], monkeypatch: pytest.MonkeyPatch
) -> None:
    threshold = 50 * PER_APPEND * len(VALUE)
    monkeypatch.setattr(storage, "WAL_CHECKPOINT_BYTES", threshold)
    reader = sqlite3.connect(partition.path, isolation_level=None)
    for _ in range(10):  # ten times the threshold
        append(partition, 50)
        # As when appends go on while a checkpoint runs: it cannot copy what lies beyond the snapshot
        # of a reader that began before them (nor, then, let the WAL start over).
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM batches").fetchone()
        append(partition, 5)
        started[-1].run()
        reader.execute("COMMIT")
    reader.close()
    assert len(started) == 10
    assert wal_size(partition.path) < 3 * threshold
    assert len(partition.read(0, 100_000).values) == 550 * PER_APPEND  # type: ignore[union-attr]


def test_a_failed_background_checkpoint_is_logged_and_appends_go_on(
    partition: LogPartition, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def fail(path: Path, fsync: bool) -> Future[None]:
        failed: Future[None] = Future()
        failed.set_exception(sqlite3.OperationalError("disk I/O error"))
        return failed

    monkeypatch.setattr(storage, "checkpoint_in_background", fail)
    monkeypatch.setattr(storage, "WAL_CHECKPOINT_BYTES", 10 * PER_APPEND * len(VALUE))
    with caplog.at_level(logging.WARNING, logger="millstream.systems.log.wal"):
        append(partition, 12)
    assert "a background WAL checkpoint failed" in caplog.text
    assert "disk I/O error" in caplog.text
    assert "p0.db" in caplog.text
    assert len(partition.read(0, 1000).values) == 12 * PER_APPEND  # type: ignore[union-attr]


def test_a_checkpoint_of_a_deleted_partition_file_fails_without_creating_it_again(tmp_path: Path) -> None:
    path = tmp_path / "gone.db"
    with pytest.raises(sqlite3.OperationalError):
        checkpoint_in_background(path, False).result(timeout=30)
    assert not path.exists()


def test_the_appending_connection_still_checkpoints_by_itself_should_the_background_fall_behind(
    partition: LogPartition,
) -> None:
    pages = partition._connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    assert pages * PAGE_SIZE == WAL_BACKSTOP_BYTES


def _checkpoint_in_child(path: str, done: Any) -> None:
    checkpoint_in_background(Path(path), False).result(timeout=30)
    done.put("checkpointed")


def test_a_forked_process_gets_a_checkpoint_thread_of_its_own(partition: LogPartition) -> None:
    append(partition)
    checkpoint_in_background(partition.path, False).result(timeout=30)  # the parent's thread runs
    context = multiprocessing.get_context("fork")
    done = context.SimpleQueue()
    child = context.Process(target=_checkpoint_in_child, args=(str(partition.path), done))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert done.get() == "checkpointed"
