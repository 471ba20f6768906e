"""An attempt of a container owns its tasks' store directories: it works in its own directory, and a
superseded attempt (a zombie) can neither snapshot into nor clean up the checkpoint directories the newer
attempt owns; the owner deletes the older attempts' working directories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.file_locks import process_state
from millstream.storage.layout import checkpoint_dirs
from millstream.storage.ownership import StoreDirectoryFencedError, claim, owned, owner_file
from millstream.storage.ownership import may_end_holder as may_end
from tests.helpers import wait_until
from tests.storage.harness import EVERY_COMMIT, Opened, StateHarness, state_config


def attempt(epoch: int, generation: int = 1, container: str = "0") -> WriterToken:
    return WriterToken("test-1", container, generation, epoch)


def working_dir(opened: Opened) -> Path:
    return opened.storage.backend_context(["counts"]).stores["counts"].store_dir


def tree(directory: Path) -> set[str]:
    return {str(path.relative_to(directory)) for path in directory.rglob("*") if path.name != "LOG"}


def test_a_zombie_cannot_snapshot_or_clean_up_once_a_newer_attempt_owns_the_directories(tmp_path: Path) -> None:
    harness = StateHarness(state_config(tmp_path, "changelog", **EVERY_COMMIT))
    zombie = harness.open(writer=attempt(1))
    zombie.store.put("a", 1)
    harness.commit(zombie)
    zombie_dir = working_dir(zombie)
    unfinished = CheckpointId.create()
    zombie.storage.snapshot(unfinished)  # a commit under way while the newer attempt takes over
    owner = harness.open(writer=attempt(2))
    owner_dir = working_dir(owner)
    assert (zombie_dir.name, owner_dir.name) == ("Partition_0@1.1", "Partition_0@1.2")
    assert not zombie_dir.exists()  # the owner deleted the zombie's working directory
    assert owner.store.get("a") == 1
    owner.store.put("a", 2)
    harness.commit(owner)
    before = tree(owner_dir.parent)
    assert len(checkpoint_dirs(owner_dir)) == 1

    with pytest.raises(
        StoreDirectoryFencedError, match=r"attempt 1 of generation 1 .*attempt 2 of generation 1 owns it"
    ):
        zombie.storage.snapshot(CheckpointId.create())
    with pytest.raises(StoreDirectoryFencedError):  # it would delete its first commit's directory
        zombie.storage.cleanup(unfinished, {})
    zombie.store.put("a", 99)
    zombie.storage.write_back()  # as its next commit would
    with pytest.raises(WriterFencedError, match=r"log\.counts-changelog partition 0: container 0 attempt 1"):
        zombie.producers.flush("Partition 0")
    assert tree(owner_dir.parent) == before
    owner.close()
    assert harness.open(writer=attempt(3)).store.get("a") == 2


def test_an_attempt_of_an_older_generation_cannot_claim_what_a_newer_generation_owns(tmp_path: Path) -> None:
    store_dir = tmp_path / "counts" / "Partition_0@2.1"
    claim(store_dir, attempt(1, generation=2, container="1"))
    with pytest.raises(StoreDirectoryFencedError, match="generation 2 owns it"):
        claim(store_dir.with_name("Partition_0@1.7"), attempt(7, generation=1))
    with owned(store_dir, attempt(1, generation=2, container="1")):
        pass  # the owner itself passes


HOLDER = """
import os, signal, sys
from pathlib import Path
from millstream.contracts.systems import WriterToken
from millstream.storage.ownership import claim, owned

store_dir, epoch, then = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
writer = WriterToken("test-1", "0", 1, epoch)
claim(store_dir, writer)
with owned(store_dir, writer):
    print("holding", flush=True)
    if then == "stop":
        os.kill(os.getpid(), signal.SIGSTOP)
    else:
        sys.stdin.readline()
"""


def hold_the_owner_lock(store_dir: Path, epoch: int, then: str) -> subprocess.Popen[str]:
    """A process of attempt ``epoch`` that claims ``store_dir`` and holds its owner lock, then stops itself
    (``then="stop"``, as ``SIGSTOP`` or a frozen VM would) or waits for a line on its standard input."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store_dir), str(epoch), then],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline() == "holding\n"
    return process


def test_a_stopped_earlier_attempt_holding_the_owner_lock_is_ended_by_the_next_attempts_claim(tmp_path: Path) -> None:
    store_dir = tmp_path / "counts" / "Partition_0@1.1"
    holder = hold_the_owner_lock(store_dir, 1, "stop")
    try:
        wait_until(lambda: process_state(holder.pid) == "stopped", 60, "the holder stopped with the lock")
        claim(store_dir.with_name("Partition_0@1.2"), attempt(2))  # hung for as long as the holder was stopped
        assert holder.wait(60) == -signal.SIGKILL
    finally:
        holder.kill()
        holder.wait(30)
    with pytest.raises(StoreDirectoryFencedError, match="attempt 2 of generation 1 owns it"):
        claim(store_dir, attempt(1))


def test_a_running_holder_of_the_owner_lock_is_waited_for_not_ended(tmp_path: Path) -> None:
    store_dir = tmp_path / "counts" / "Partition_0@1.1"
    holder = hold_the_owner_lock(store_dir, 1, "wait")
    claimed = threading.Event()

    def claim_as_attempt_2() -> None:
        claim(store_dir.with_name("Partition_0@1.2"), attempt(2))
        claimed.set()

    claimer = threading.Thread(target=claim_as_attempt_2)
    try:
        claimer.start()
        assert not claimed.is_set()
        assert holder.stdin is not None
        holder.stdin.write("release\n")
        holder.stdin.flush()
        assert holder.wait(60) == 0
        claimer.join(60)
        assert claimed.is_set()
    finally:
        holder.kill()
        holder.wait(30)


def test_a_stopped_holder_the_owner_file_names_as_a_newer_attempt_is_not_ended(tmp_path: Path) -> None:
    store_dir = tmp_path / "counts" / "Partition_0@1.3"
    holder = hold_the_owner_lock(store_dir, 3, "wait")
    assert holder.stdin is not None
    holder.stdin.write("release\n")
    holder.stdin.flush()
    assert holder.wait(60) == 0
    path = owner_file(store_dir)
    assert not may_end(path, holder.pid, attempt(2)), "attempt 3 supersedes attempt 2: the waiter is the zombie"
    assert not may_end(path, holder.pid, attempt(3))
    assert may_end(path, holder.pid, attempt(4))
    assert may_end(path, holder.pid + 1, attempt(2)), "a process the owner file does not name"
    assert not may_end(path, os.getpid(), attempt(4)), "never this process (another container of it holds the lock)"
