"""An attempt of a container owns its tasks' store directories: it works in its own directory, and a
superseded attempt (a zombie) can neither snapshot into nor clean up the checkpoint directories the newer
attempt owns; the owner deletes the older attempts' working directories."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.storage.layout import checkpoint_dirs
from millstream.storage.ownership import StoreDirectoryFencedError, claim, owned
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
