"""A job whose state directory becomes unusable while it runs (a disk that fails or fills up, a directory
removed by a cleanup script): the next commit that makes the store's local checkpoint fails naming the store and
the directory (the commits between local checkpoints touch no file there), the job fails instead of running on
without them, and once the directory is back a restart restores the exact state.

The directory is swapped for a file, which makes every write under it fail for any user (a read-only
directory does not stop root); the disk-full case at the same boundary is ``managers/test_snapshot_failures``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.coordinator.job_result import JobResult
from millstream.storage.layout import StoreLayout
from millstream.testing import InProcessRunner
from tests.helpers import create_stream, fill, seal, wait_until
from tests.storage.test_stateful_jobs import config_for, final_stores

Run = Callable[[Settings], JobResult]


def break_the_state_dir_then_repair_it(tmp_path: Path, run: Run) -> None:
    """Run the job, swap its stores' directory for a file once it has checkpointed, check the failure,
    put the directory back and run the job to its end."""
    # a local checkpoint every 200 ms: one comes due while the tasks still process (2 s each)
    config = config_for(
        tmp_path, "changelog", test__delay__seconds=0.002, stores__counts__local__checkpoint__interval__ms=200
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    written = fill(config, "in", 2, 1000)  # unsealed: the job runs until the directory goes
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", run(config)))
    job.start()
    with metadata_store(config) as store:
        wait_until(lambda: checkpoint_manager(config, store).read_all(), 120, "no checkpoint was written")
    stores = StoreLayout.of(config).logged_base / "counts"
    moved = stores.with_name("counts.moved")
    stores.rename(moved)
    stores.write_text("not a directory")
    job.join(180)
    result = outcome["result"]
    assert result.outcome == "failed"
    assert "store 'counts'" in (result.error or "") and f"'{stores}" in (result.error or ""), result.error

    stores.unlink()
    moved.rename(stores)
    written |= fill(config, "in", 2, 100, start=1000)
    seal(config, "in")
    rerun = run(config)
    assert rerun.outcome == "finished", rerun.error
    assert final_stores(config) == dict(Counter(f"k{p}" for p, _ in written))


def test_a_state_directory_gone_mid_run_fails_the_commit_naming_it_and_a_restart_restores_exactly(
    tmp_path: Path,
) -> None:
    break_the_state_dir_then_repair_it(tmp_path, lambda config: InProcessRunner(config).run(timeout=120))
