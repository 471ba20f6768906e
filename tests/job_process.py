"""A job run as ``millstream run --in-process`` in a process of its own, so a test can SIGKILL or SIGSTOP it at a
commit point (``task.commit.testing.pause.at``) as a crash or a pause would hit a container."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from millstream.checkpoint.factory import checkpoint_manager
from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.testing import InProcessRunner
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[1]
COMMIT_POINTS = ("before-snapshot", "after-snapshot", "after-upload", "after-checkpoint")
"""Where a commit pauses for the kill: under exactly-once all but the last come before the transaction commits."""


def in_process(config: Settings, tmp_path: Path) -> subprocess.Popen[bytes]:
    """``config`` run as ``millstream run --in-process`` in a process of its own, its output in ``job.log``."""
    path = tmp_path / "job.properties"
    path.write_text("".join(f"{key}={value}\n" for key, value in config.items()))
    with (tmp_path / "job.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "millstream.cli.main", "run", str(path), "--in-process"],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def paused_at(point: str, tmp_path: Path) -> dict[str, str]:
    """The overrides that make a job's first commit pause at ``point`` and say so with a marker file."""
    return {
        "task__commit__testing__pause__at": point,
        "task__commit__testing__pause__ms": "60000",
        "task__commit__testing__marker__dir": str(tmp_path / "markers"),
    }


def killed_at(config: Settings, point: str, tmp_path: Path) -> None:
    """Run ``config`` in a process of its own and SIGKILL it where its first commit paused at ``point``."""
    markers = Path(config["task.commit.testing.marker.dir"])
    job = in_process(config, tmp_path)
    try:
        wait_until(lambda: (markers / point).exists() or job.poll() is not None, 120, f"a commit paused at {point}")
        assert job.poll() is None, f"the job ended with {job.returncode} before pausing at {point}: " + "".join(
            (tmp_path / "job.log").read_text(errors="replace").splitlines(keepends=True)[-15:]
        )
        os.kill(job.pid, signal.SIGKILL)
    finally:
        job.kill()
        job.wait(30)


def input_checkpointed(config: Settings) -> dict[int, int]:
    """Input partition → its checkpointed offset (committed checkpoints only)."""
    stream = config["task.inputs"].split(".", 1)[1]
    with metadata_store(config) as store, checkpoint_manager(config, store) as manager:
        manager.start()
        return {
            ssp.partition: int(offset)
            for checkpoint in manager.read_all().values()
            for ssp, offset in checkpoint.offsets.items()
            if ssp.stream == stream and offset is not None
        }


def run_until_everything_is_checkpointed(config: Settings, per_partition: int, partitions: int = 2) -> None:
    """Run ``config`` in this process until every input partition's last offset is checkpointed, then stop it."""
    runner = InProcessRunner(config)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.setdefault("result", runner.run(timeout=300)), daemon=True)
    thread.start()
    try:
        done = dict.fromkeys(range(partitions), per_partition - 1)
        wait_until(lambda: input_checkpointed(config) == done or not thread.is_alive(), 180, "inputs checkpointed")
    finally:
        runner.request_stop()
        thread.join(120)
    assert outcome["result"].outcome == "stopped", outcome["result"].error
