"""A process stopped (``SIGSTOP``) while it holds the SQLite metadata store's write lock, with real processes
on a real file: writers wait for it within its lease and name it; past the lease a writer that may not break the
lock fails naming it, and the job's newest driver ends it and takes over."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from millstream.embedded.sqlite import MetadataStoreError, SqliteLockSettings, SqliteMetadataStore
from millstream.file_locks import process_state
from tests.embedded.lock_holder import NAMESPACE
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[2]
WRITER = "container 0 attempt 1"


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A process that holds the write lock of ``tmp_path/metadata.db`` and is stopped."""
    database, markers = tmp_path / "metadata.db", tmp_path / "markers"
    SqliteMetadataStore(database).init()
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.embedded.lock_holder", str(database), str(markers), WRITER],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        wait_until(lambda: process_state(process.pid) == "stopped", 60, "the holder stopped holding the lock")
        assert (markers / f"metadata-write-{NAMESPACE}").read_text() == str(process.pid)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def _named(holder: subprocess.Popen[bytes]) -> str:
    return f"held by {WRITER} pid {holder.pid} on host {socket.gethostname()} since "


def _store(tmp_path: Path, lease_ms: int) -> SqliteMetadataStore:
    return SqliteMetadataStore(tmp_path / "metadata.db", SqliteLockSettings(lease_ms=lease_ms, wait_ms=100))


def test_a_writer_waits_for_a_stopped_holder_within_its_lease_naming_it_and_writes_once_it_resumes(
    tmp_path, holder, caplog
):
    caplog.set_level(logging.WARNING, logger="millstream.embedded.sqlite")
    store = _store(tmp_path, lease_ms=600_000)
    failures: list[BaseException] = []

    def write() -> None:
        try:
            store.put("commits", "task-0", b"after the pause")
        except BaseException as error:
            failures.append(error)

    writer = threading.Thread(target=write)
    writer.start()
    wait_until(lambda: _named(holder) in caplog.text, 60, "a warning naming the stopped holder")
    assert "(stopped)" in caplog.text and "metadata.store.lock.lease.ms=600000" in caplog.text
    os.kill(holder.pid, signal.SIGCONT)
    writer.join(60)
    assert not writer.is_alive() and failures == []
    assert holder.wait(60) == 0
    assert store.get("commits", "task-0") == b"after the pause"
    assert store.get(NAMESPACE, "by-holder") == b"written after the stop"
    store.close()


def test_past_the_lease_a_writer_that_may_not_break_the_lock_fails_naming_the_holder(tmp_path, holder):
    store = _store(tmp_path, lease_ms=500)
    with pytest.raises(MetadataStoreError) as raised:
        store.put("commits", "task-0", b"x")
    message = str(raised.value)
    assert _named(holder) in message and "past its lease (metadata.store.lock.lease.ms=500)" in message
    assert "this process may not break it" in message
    assert process_state(holder.pid) == "stopped"
    store.close()


def test_the_newest_driver_ends_a_stopped_holder_past_its_lease_and_takes_over(tmp_path, holder, caplog):
    caplog.set_level(logging.WARNING, logger="millstream.embedded.sqlite")
    store = _store(tmp_path, lease_ms=500)
    store.set_writer("the driver")
    store.take_over()
    store.put("job-coordinator", "generation", b"2")
    assert holder.wait(60) == -signal.SIGKILL
    assert _named(holder) in caplog.text
    assert f"ending pid {holder.pid} so this newer run can take over" in caplog.text
    assert store.get("job-coordinator", "generation") == b"2"
    assert store.get(NAMESPACE, "by-holder") is None  # the holder's open transaction was rolled back
    store.close()
