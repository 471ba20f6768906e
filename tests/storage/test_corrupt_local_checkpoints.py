"""A corrupt local checkpoint directory never fails a job whose backend holds the whole state: the
changelog backend replays all of its changelog instead (and deletes the directory), the blob-store
backend verifies every file against the snapshot index and downloads instead. Stateful jobs run twice
in-process with the local directories damaged in between; the final state equals the reference."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from millstream.config.settings import Settings
from millstream.storage.layout import CHECKPOINT_V2_FILE, OFFSET_V2_FILE, StoreLayout, checkpoint_dir, checkpoint_dirs
from tests.helpers import fill, seal
from tests.storage.harness import Opened, StateHarness, state_config
from tests.storage.test_stateful_jobs import config_for, final_stores, prepare, reference, run_to_end, run_until_read

Damage = Callable[[Path], None]


def local_checkpoint_dirs(config: Settings) -> list[Path]:
    """Every task's local checkpoint directories of the ``counts`` store."""
    stores = StoreLayout.of(config).logged_base / "counts"
    return sorted(p for p in stores.iterdir() if p.is_dir() and "-" in p.name)


def overwrite_middle(path: Path, length: int = 200) -> None:
    """Overwrite bytes in the middle of a file in place: same name, same size, other content."""
    data = path.read_bytes()
    middle = len(data) // 2
    start = max(0, middle - length // 2)
    with open(path, "r+b") as file:
        file.seek(start)
        file.write(bytes(b ^ 0xFF for b in data[start : start + length]))


def corrupt_ssts(directory: Path) -> None:
    ssts = list(directory.glob("*.sst"))
    assert ssts, f"no SST in {directory}"
    for sst in ssts:
        overwrite_middle(sst)


def truncate_offset_file(directory: Path) -> None:
    """A directory described only by its OFFSET file (as one written with V1 checkpoints), cut short."""
    (directory / CHECKPOINT_V2_FILE).unlink()
    offset_file = directory / OFFSET_V2_FILE
    offset_file.write_bytes(offset_file.read_bytes()[:7])


def garbage_offset_file(directory: Path) -> None:
    (directory / CHECKPOINT_V2_FILE).unlink()
    offsets = {f"log.counts-changelog.{p}": "not-a-checkpoint-id:3" for p in (0, 1)}
    (directory / OFFSET_V2_FILE).write_text(str(offsets).replace("'", '"'))


def garbage_checkpoint_file(directory: Path) -> None:
    (directory / CHECKPOINT_V2_FILE).write_bytes(b'{"version": 2, "checkpoint-id"')


def run_twice_with_damage(config: Settings, damage: Damage) -> list[Path]:
    """Run until every input is checkpointed, damage every local checkpoint directory, add input and run
    to the end; the directories that were damaged."""
    written = prepare(config)
    run_until_read(config, 120)
    damaged = local_checkpoint_dirs(config)
    assert len(damaged) == 2
    for directory in damaged:
        damage(directory)
    written |= fill(config, "in", 2, 40, start=60)
    seal(config, "in")
    run_to_end(config)
    assert final_stores(config) == reference(written) == {"k0": 100, "k1": 100}
    return damaged


def warned_about(caplog: pytest.LogCaptureFixture, directory: Path) -> bool:
    return any(r.levelno == logging.WARNING and f"'{directory}'" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "damage",
    [corrupt_ssts, truncate_offset_file, garbage_offset_file, garbage_checkpoint_file],
    ids=["corrupt-sst", "truncated-offset-file", "garbage-offset-file", "garbage-checkpoint-file"],
)
def test_a_damaged_local_checkpoint_is_deleted_and_the_changelog_restores_the_exact_state(
    tmp_path: Path, damage: Damage, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_for(tmp_path, "changelog")
    with caplog.at_level(logging.WARNING, logger="millstream.storage.backends.changelog.restore"):
        damaged = run_twice_with_damage(config, damage)
    for directory in damaged:
        assert warned_about(caplog, directory), directory
        assert not directory.exists()


def test_a_modified_file_in_a_local_blob_store_checkpoint_is_detected_and_downloaded_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = config_for(tmp_path, "blobstore")
    modified: list[Path] = []

    def modify_an_sst(directory: Path) -> None:
        modified.append(next(directory.glob("*.sst")))
        overwrite_middle(modified[-1])

    with caplog.at_level(logging.WARNING, logger="millstream.storage.backends.blobstore.restore"):
        damaged = run_twice_with_damage(config, modify_an_sst)
    assert len(modified) == len(damaged) == 2
    for directory, sst in zip(damaged, modified, strict=True):
        assert any(f"'{sst}'" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING), sst
        assert not directory.exists()


def large_store(tmp_path: Path, backend: str) -> tuple[StateHarness, dict[str, str], Path, Path]:
    """A committed store with an SST over 1 MiB (incompressible values, many data blocks), crashed:
    (harness, its contents, the local checkpoint directory, its largest SST)."""
    harness = StateHarness(state_config(tmp_path, backend, stores__counts__msg__serde="string"))
    opened: Opened = harness.open()
    generator = random.Random(21)
    contents = {f"k{i:06d}": generator.randbytes(300).hex() for i in range(4000)}
    opened.store.put_all(contents)
    checkpoint = harness.commit(opened)
    assert checkpoint is not None
    store_dir = opened.storage.backend_context(["counts"]).stores["counts"].store_dir
    opened.storage.close()
    opened.container.close()
    local = checkpoint_dir(store_dir, checkpoint.checkpoint_id)
    assert list(checkpoint_dirs(store_dir).values()) == [local]
    largest = max(local.glob("*.sst"), key=lambda p: p.stat().st_size)
    assert largest.stat().st_size > 1 << 20
    return harness, contents, local, largest


@pytest.mark.parametrize("backend", ["changelog", "blobstore"])
def test_a_corrupt_data_block_deep_in_a_large_local_sst_never_reaches_the_restored_store(
    tmp_path: Path, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening RocksDB reads an SST's footer and index only, and a blob-store size check passes a file
    modified in place: the restore must read every block (changelog) or every checksum (blob store)."""
    harness, contents, local, largest = large_store(tmp_path, backend)
    overwrite_middle(largest, 64)
    with caplog.at_level(logging.WARNING, logger="millstream.storage.backends"):
        restored = harness.open()
    try:
        assert dict(restored.store.all()) == contents
    finally:
        restored.close()
    assert any(str(largest if backend == "blobstore" else local) in r.getMessage() for r in caplog.records)
    assert not local.exists() or backend == "blobstore"
