"""A store whose only backup is its changelog makes a local checkpoint directory every
``stores.<s>.local.checkpoint.interval.ms``: the commits in between flush nothing into RocksDB's files and record
only the changelog's offset, and a restart restores their state exactly, from the newest directory and the
changelog records after it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from millstream.checkpoint.checkpoint import CheckpointId
from millstream.contracts.metrics import Registry
from millstream.storage.layout import checkpoint_dir, checkpoint_dirs
from millstream.storage.managers import stores
from millstream.storage.small_tables import SMALL_TABLES_MAX
from tests.storage.harness import EVERY_COMMIT, Opened, StateHarness, state_config

START_MS = 1_000_000
INTERVAL_MS = 10_000
HOUR_MS = 3_600_000


def local_checkpoints(opened: Opened) -> list[CheckpointId]:
    store_dir = opened.storage.backend_context(["counts"]).stores["counts"].store_dir
    return sorted(checkpoint_dirs(store_dir))


def sst_files(opened: Opened) -> int:
    store_dir = opened.storage.backend_context(["counts"]).stores["counts"].store_dir
    return len(list(store_dir.glob("*.sst")))


def crash(opened: Opened) -> None:
    """The process dies after its last commit: nothing more is written back or flushed."""
    opened.storage.close()
    opened.container.close()
    opened.services.close()


def test_commits_within_the_interval_make_no_local_checkpoint_and_flush_no_memtable(tmp_path: Path) -> None:
    h = StateHarness(state_config(tmp_path, "changelog"))
    opened = h.open()
    opened.store.put("a", 1)
    first = h.commit(opened, now_ms=START_MS)
    assert first is not None
    assert local_checkpoints(opened) == [first.checkpoint_id]
    flushed = sst_files(opened)
    for step in range(1, 4):
        opened.store.put("a", 1 + step)
        h.commit(opened, now_ms=START_MS + step * (INTERVAL_MS // 4))
    assert local_checkpoints(opened) == [first.checkpoint_id]
    assert sst_files(opened) == flushed
    opened.store.put("a", 9)
    due = h.commit(opened, now_ms=START_MS + INTERVAL_MS)
    assert due is not None
    assert local_checkpoints(opened) == [due.checkpoint_id], "the older directory goes once a newer one is durable"
    assert sst_files(opened) > flushed
    opened.close()


def test_commits_within_the_interval_take_no_owner_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the owner lock is a mkdir, an open, a flock and a read per store: a third of a commit's CPU when every commit
    # took it, with nothing to make or delete
    taken: list[Path] = []
    real_owned = stores.owned

    def counting_owned(store_dir: Path, *args: Any, **kwargs: Any) -> Any:
        taken.append(store_dir)
        return real_owned(store_dir, *args, **kwargs)

    monkeypatch.setattr(stores, "owned", counting_owned)
    h = StateHarness(state_config(tmp_path, "changelog"))
    opened = h.open()
    opened.store.put("a", 1)
    first = h.commit(opened, now_ms=START_MS)
    assert first is not None
    assert taken, "the first commit makes a directory and cleans up what earlier attempts left, under the lock"
    taken.clear()
    for step in range(1, 4):
        opened.store.put("a", 1 + step)
        h.commit(opened, now_ms=START_MS + step * (INTERVAL_MS // 4))
    assert taken == []
    opened.store.put("a", 9)
    due = h.commit(opened, now_ms=START_MS + INTERVAL_MS)
    assert due is not None
    assert len(taken) == 3, "the due commit's snapshot, its description files, and its cleanup of the older directory"
    assert local_checkpoints(opened) == [due.checkpoint_id]
    opened.close()


def test_a_restart_after_commits_without_a_local_checkpoint_replays_them_onto_the_newest_one(tmp_path: Path) -> None:
    # the commits' times are the clock's: the restore compares the checkpoint's with it (compaction lag)
    h = StateHarness(state_config(tmp_path, "changelog", stores__counts__local__checkpoint__interval__ms=HOUR_MS))
    opened = h.open()
    opened.store.put_all({f"k{i}": i for i in range(50)})
    first = h.commit(opened)
    assert first is not None
    opened.store.put_all({f"k{i}": -i for i in range(25, 75)})
    opened.store.delete("k0")
    h.commit(opened)
    assert local_checkpoints(opened) == [first.checkpoint_id]
    opened.store.put("uncommitted", 1)  # written back and in the changelog, but no checkpoint covers it
    opened.storage.write_back()
    opened.producers.flush("Partition 0")
    crash(opened)

    registry = Registry()
    restarted = h.open(h.checkpoint, metrics=registry)
    expected = {**{f"k{i}": i for i in range(1, 25)}, **{f"k{i}": -i for i in range(25, 75)}}
    assert dict(restarted.store.all()) == expected
    replayed = {sample.name: sample.value for sample in registry.snapshot()}["store_restored_records"]
    assert replayed == 51, "only the second commit's 51 records follow the local checkpoint (101 in all)"
    restarted.close()


def test_the_first_commit_of_an_attempt_makes_a_local_checkpoint_whatever_the_interval(tmp_path: Path) -> None:
    h = StateHarness(state_config(tmp_path, "changelog"))
    opened = h.open()
    opened.store.put("a", 1)
    h.commit(opened, now_ms=START_MS)
    opened.close()
    restarted = h.open(h.checkpoint)
    restarted.store.put("a", 2)
    again = h.commit(restarted, now_ms=START_MS + 1)
    assert again is not None
    assert local_checkpoints(restarted) == [again.checkpoint_id]
    restarted.close()


@pytest.mark.parametrize(
    ("backend", "extra"),
    [
        pytest.param("changelog", {"stores__counts__local__checkpoint__interval__ms": 0}, id="an-interval-of-zero"),
        pytest.param("both", {}, id="a-store-a-blob-store-backs-up"),
    ],
)
def test_an_interval_of_zero_or_a_blob_store_backup_makes_a_local_checkpoint_at_every_commit(
    tmp_path: Path, backend: str, extra: dict[str, Any]
) -> None:
    h = StateHarness(state_config(tmp_path, backend, **extra))
    opened = h.open()
    for step in range(3):
        opened.store.put("a", step)
        made = h.commit(opened, now_ms=START_MS + step)
        assert made is not None
        assert local_checkpoints(opened) == [made.checkpoint_id]
    opened.close()


def test_a_clean_stop_makes_the_local_checkpoint_that_was_not_due_and_a_restart_replays_nothing(
    tmp_path: Path,
) -> None:
    h = StateHarness(state_config(tmp_path, "changelog", stores__counts__local__checkpoint__interval__ms=HOUR_MS))
    opened = h.open()
    opened.store.put_all({f"k{i}": i for i in range(20)})
    h.commit(opened)
    opened.store.put_all({f"k{i}": -i for i in range(10, 30)})
    last = h.commit(opened)
    assert last is not None and local_checkpoints(opened) != [last.checkpoint_id]
    opened.storage.seal()
    assert local_checkpoints(opened) == [last.checkpoint_id], "the older directory goes"
    opened.close()
    registry = Registry()
    restarted = h.open(h.checkpoint, metrics=registry)
    assert dict(restarted.store.all()) == {**{f"k{i}": i for i in range(10)}, **{f"k{i}": -i for i in range(10, 30)}}
    assert {sample.name: sample.value for sample in registry.snapshot()}["store_restored_records"] == 0
    restarted.close()


def test_a_stop_seals_nothing_when_the_stores_changed_after_the_last_checkpoint(tmp_path: Path) -> None:
    h = StateHarness(state_config(tmp_path, "changelog", stores__counts__local__checkpoint__interval__ms=HOUR_MS))
    opened = h.open()
    opened.store.put("a", 1)
    first = h.commit(opened)
    opened.store.put("a", 2)
    h.commit(opened)
    opened.store.put("a", 3)  # not committed: no directory may claim the last checkpoint's state holds it
    opened.storage.write_back()
    opened.storage.seal()
    assert first is not None and local_checkpoints(opened) == [first.checkpoint_id]
    opened.close()


def test_a_stop_seals_nothing_before_the_last_checkpoint_is_known_durable(tmp_path: Path) -> None:
    """Under exactly-once a checkpoint is durable once the container's transaction commits, and only then cleaned
    up: a snapshot whose cleanup did not run may name state no durable checkpoint holds."""
    h = StateHarness(state_config(tmp_path, "changelog", stores__counts__local__checkpoint__interval__ms=HOUR_MS))
    opened = h.open()
    opened.store.put("a", 1)
    first = h.commit(opened)
    opened.store.put("a", 2)
    h.commit(opened, stop_after="checkpoint")
    opened.storage.seal()
    assert first is not None and local_checkpoints(opened) == [first.checkpoint_id]
    opened.close()


def test_a_store_checkpointed_at_every_commit_with_ascending_keys_keeps_a_bounded_number_of_table_files(
    tmp_path: Path,
) -> None:
    """Each commit's local checkpoint flushes the memtable; keys beyond every earlier one made a table file per
    commit that RocksDB never merged, each held open and hard-linked into every later checkpoint directory. After
    60 commits its newest checkpoint directory holds a few files, and a restart restores every key from it."""
    harness = StateHarness(state_config(tmp_path, "changelog", **EVERY_COMMIT))
    opened = harness.open()
    store_dir = opened.storage._stores["counts"].spec.store_dir
    for commit in range(60):
        opened.store.put(f"{commit:04d}", commit)
        latest = harness.commit(opened)
    assert latest is not None
    (checkpoint,) = checkpoint_dirs(store_dir)
    held = [path for path in checkpoint_dir(store_dir, checkpoint).iterdir() if path.suffix == ".sst"]
    assert 0 < len(held) <= SMALL_TABLES_MAX + 1
    opened.close()
    reopened = harness.open()
    assert dict(reopened.store.all()) == {f"{commit:04d}": commit for commit in range(60)}
    reopened.close()
