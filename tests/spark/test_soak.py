"""The short soak CI runs: the harness users run for the long one, killing a stateful job five times per
state backend through the Spark runner, must find nothing wrong."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]


def test_a_stateful_job_killed_five_times_per_backend_still_gives_exact_counts_and_final_stores() -> None:
    command = [sys.executable, "-m", "benchmarks.soak", "--kills", "5", "--records", "2000", "--seed", "7"]
    soak = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    rows = [line.split() for line in soak.stdout.splitlines()[1:]]
    assert soak.returncode == 0, soak.stdout + soak.stderr[-3000:]
    assert [row[0] for row in rows] == ["blobstore", "changelog"]
    assert all(int(row[3]) >= 5 and row[-1] == "none" for row in rows), soak.stdout


def test_an_exactly_once_job_killed_at_its_commit_points_through_the_spark_runner_writes_each_count_once() -> None:
    # seeds 10 and 11 cut commits before the snapshot and after the transaction committed; one broker for both
    command = [sys.executable, "-m", "benchmarks.soak", "--exactly-once", "--kills", "3", "--records", "1500"]
    soak = subprocess.run(
        [*command, "--seed", "10", "--runs", "2"], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert soak.returncode == 0, soak.stdout + soak.stderr[-3000:]
    rows = [line.split() for line in soak.stdout.splitlines()[1:]]
    assert [(row[0], row[2]) for row in rows] == [
        ("changelog+kafka", "before-snapshot"),
        ("changelog+kafka", "after-checkpoint"),
    ]
    assert all(int(row[3]) >= 3 and float(row[5]) == 0.0 and row[-1] == "none" for row in rows), rows


def test_an_exactly_once_job_on_the_embedded_log_killed_through_the_spark_runner_writes_each_count_once() -> None:
    command = [sys.executable, "-m", "benchmarks.soak", "--log-exactly-once", "--kills", "3", "--records", "1500"]
    soak = subprocess.run([*command, "--seed", "9"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert soak.returncode == 0, soak.stdout + soak.stderr[-3000:]
    rows = [line.split() for line in soak.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == ["changelog"]  # killed at random and once after a transaction committed
    assert all(int(row[3]) >= 3 and float(row[5]) == 0.0 and row[-1] == "none" for row in rows), rows
