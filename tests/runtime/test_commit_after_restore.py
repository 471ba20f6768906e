"""A container commits as soon as its tasks start when a changelog restore reverted writes that no
checkpoint covers (a crashed attempt's last writes): the revert is sealed in a checkpoint at once, as
Samza does, instead of waiting for ``task.commit.ms``. A restore that reverted nothing commits nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.model import SystemStream
from millstream.testing import InProcessRunner, write_stream
from tests.helpers import seal
from tests.storage.test_stateful_jobs import config_for, final_stores, prepare, reference, run_to_end, run_until_read

NO_TIMER_COMMIT = {"task.commit.ms": "3600000"}


def checkpoints(config: Settings) -> dict[Any, Any]:
    return checkpoint_manager(config, metadata_store(config)).read_all()


def committed_job(tmp_path: Path) -> tuple[Settings, set[tuple[int, int]]]:
    """Both tasks read and checkpointed all of their input; no timer commit in the runs that follow."""
    config = config_for(tmp_path, "changelog")
    written = prepare(config)
    run_until_read(config, 120)
    return config.with_overrides(NO_TIMER_COMMIT), written


def checkpoints_while_running(config: Settings, changed: Any, seconds: float = 20) -> dict[Any, Any]:
    """Run the job on its unsealed input until ``changed(checkpoints)`` holds or ``seconds`` pass, then stop
    it; returns the checkpoints seen while it was still running."""
    runner = InProcessRunner(config)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", runner.run(timeout=90)))
    thread.start()
    deadline = time.monotonic() + seconds
    seen = checkpoints(config)
    while thread.is_alive() and time.monotonic() < deadline and not changed(seen):
        time.sleep(0.05)  # polling interval of the wait, not a synchronisation
        seen = checkpoints(config)
    assert thread.is_alive(), f"the job ended early: {outcome.get('result')}"
    runner.request_stop()
    thread.join(60)
    assert outcome["result"].outcome == "stopped", outcome["result"].error
    return seen


def test_a_restore_that_reverted_writes_seals_them_in_a_checkpoint_before_any_message(tmp_path: Path) -> None:
    config, written = committed_job(tmp_path)
    before = checkpoints(config)
    for partition in range(2):  # what a crashed attempt wrote after its last checkpoint
        write_stream(config, SystemStream("log", "counts-changelog"), [(f"k{partition}", 999)], partition=partition)

    seen = checkpoints_while_running(config, lambda now: all(now[task] != before[task] for task in before))

    assert seen.keys() == before.keys()
    assert all(seen[task] != before[task] for task in before), "every task that reverted committed at once"
    seal(config, "in")
    run_to_end(config)
    assert final_stores(config) == reference(written) == {"k0": 60, "k1": 60}


def test_a_restore_that_reverted_nothing_writes_no_checkpoint(tmp_path: Path) -> None:
    config, written = committed_job(tmp_path)
    before = checkpoints(config)

    seen = checkpoints_while_running(config, lambda now: now != before, seconds=2)

    assert seen == before
    seal(config, "in")
    run_to_end(config)
    assert final_stores(config) == reference(written)
