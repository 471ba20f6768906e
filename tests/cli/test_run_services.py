"""``millstream run`` holds one set of driver services for the command: the plan it prints errors from, the
progress line and the run share each system's admin (counted in the command's process through the counting
factories of ``tests/coordinator/test_services.py``, which append to ``test.count.file``)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import yaml

from millstream import Job
from tests.coordinator.test_services import two_system_job, with_sealed_inputs

REPO = Path(__file__).resolve().parents[2]


def openings(path: Path) -> Counter[tuple[str, ...]]:
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return Counter(tuple(line.split()) for line in lines if "container-" not in line)


def run_command(tmp_path: Path, *options: str) -> Counter[tuple[str, ...]]:
    counted = tmp_path / "openings.txt"
    values = two_system_job(tmp_path / "data", **{"test.count.file": str(counted)})
    with_sealed_inputs(Job(values))
    counted.unlink(missing_ok=True)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(values), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "millstream.cli.main", "run", str(path), "--in-process", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return openings(counted)


def test_a_quiet_in_process_run_opens_each_systems_admin_once_in_the_command(tmp_path):
    counted = run_command(tmp_path, "--quiet")

    admins = {key: n for key, n in counted.items() if key[0] == "admin"}
    assert admins == {("admin", "MainThread", "log"): 1, ("admin", "MainThread", "side"): 1}
    # the command's connection, and the one generation's heartbeat's
    assert {key: n for key, n in counted.items() if key[0] == "store"} == {("store", "MainThread"): 2}


def test_with_the_progress_line_the_plan_and_the_run_still_share_the_commands_admins(tmp_path):
    """The progress line reads the store on a thread of its own, through a connection of its own, and (when a
    poll reads lag) admins of its own thread, at most one per system for the whole run."""
    counted = run_command(tmp_path)

    assert counted[("admin", "MainThread", "log")] == counted[("admin", "MainThread", "side")] == 1
    assert counted[("store", "MainThread")] == 2 and counted[("store", "millstream-progress")] == 1
    assert all(n == 1 for key, n in counted.items() if key[0] == "admin"), counted
