"""``task.processing.guarantee=exactly-once`` on the embedded log: a container's appends to its output and
changelog and its checkpoints commit together, so a container killed at any point of a commit neither
duplicates nor loses output, and every count is exact; readers see committed records only."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.storage import LogPartition
from millstream.embedded.log.transactions import FILE_NAME
from millstream.model import SystemStream, SystemStreamPartition
from millstream.testing import InProcessRunner, read_stream, write_stream
from tests.api.apps import app_config, messages, reference_counts
from tests.helpers import create_stream, job_config, seal, wait_until
from tests.job_process import (
    COMMIT_POINTS,
    in_process,
    input_checkpointed,
    killed_at,
    paused_at,
    run_until_everything_is_checkpointed,
)

KEYS = 5
PER_PARTITION = 120


def eos_job(tmp_path: Path, **extra: Any) -> Settings:
    config = job_config(
        tmp_path / "data",
        "tests.integration.kafka.jobs:KafkaCountPerKey",
        test__output="out",
        test__output__system="log",
        task__processing__guarantee="exactly-once",
        task__checkpoint__factory="log",
        stores__counts__factory="rocksdb",
        stores__counts__key__serde="string",
        stores__counts__msg__serde="json",
        stores__counts__changelog="log.counts-changelog",
        systems__log__auto__create__streams="true",
        **extra,
    )
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    for partition in range(2):
        records = [(f"k{i % KEYS}", i) for i in range(PER_PARTITION)]
        write_stream(config, SystemStream("log", "in"), records, partition=partition)
    return config


def exact_once(config: Settings) -> None:
    """Every input is in the output exactly once, with the count a fault-free run gives it (records another
    writer put beside the job's, ``{"marker": ...}``, aside)."""
    output = read_stream(config, SystemStream("log", "out")).values()
    records = [value for pairs in output for _, value in pairs if "marker" not in value]
    seen = sorted((r["p"], r["v"]) for r in records)
    assert seen == sorted((p, i) for p in range(2) for i in range(PER_PARTITION)), "duplicates or losses"
    wrong = [r for r in records if r["count"] != r["v"] // KEYS + 1]
    assert not wrong, wrong[:3]


def test_an_exactly_once_job_on_the_log_writes_every_count_once(tmp_path: Path) -> None:
    config = eos_job(tmp_path)
    run_until_everything_is_checkpointed(config, PER_PARTITION)
    exact_once(config)


@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_a_container_killed_at_a_commit_point_neither_duplicates_nor_loses_output(tmp_path: Path, point: str) -> None:
    config = eos_job(tmp_path, test__delay__seconds="0.005", **paused_at(point, tmp_path))
    killed_at(config, point, tmp_path)
    if point != "after-checkpoint":
        assert committed_only(config), "a killed container's open transaction must hide its records"
    if point == "before-snapshot":
        consumed = subprocess.run(
            [sys.executable, "-m", "millstream.cli.main", "streams", "consume", str(tmp_path / "job.properties"),
             "log.out"],
            cwd=Path(__file__).resolve().parents[3], capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert (consumed.returncode, consumed.stdout) == (0, ""), consumed.stderr
    run_until_everything_is_checkpointed(config, PER_PARTITION)
    exact_once(config)


def committed_only(config: Settings) -> bool:
    """Readers see no record of the killed attempt's open transaction: its output holds none yet."""
    return not any(read_stream(config, SystemStream("log", "out"), idle_timeout=0.2).values())


@pytest.mark.parametrize("point", COMMIT_POINTS)
def test_windows_behind_a_repartition_come_out_once_with_exact_counts_after_a_kill(tmp_path: Path, point: str) -> None:
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        task__processing__guarantee="exactly-once",
        task__checkpoint__factory="log",
        test__delay__seconds="0.01",
        **paused_at(point, tmp_path),
    )
    data = {p: messages(p, 60) for p in range(2)}
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    for partition, pairs in data.items():
        write_stream(config, SystemStream("log", "in"), pairs, partition=partition)
    seal(config, "in")
    killed_at(config, point, tmp_path)
    result = InProcessRunner(config).run(timeout=300)
    assert result.outcome == "finished", result.error
    panes = [value for pairs in read_stream(config, SystemStream("log", "out")).values() for _, value in pairs]
    windows = Counter((p["user"], p["start"]) for p in panes if "count" in p)
    assert set(windows.values()) == {1}, [w for w, n in windows.items() if n > 1][:3]  # each window once
    assert {(p["user"], p["start"]): p["count"] for p in panes if "count" in p} == reference_counts(data)


def test_a_paused_container_resumed_after_its_replacement_ran_commits_nothing(tmp_path: Path) -> None:
    config = eos_job(tmp_path, test__delay__seconds="0.02")
    zombie = in_process(config, tmp_path)
    try:
        wait_until(lambda: input_checkpointed(config), 120, "the first run's first commit")
        os.kill(zombie.pid, signal.SIGSTOP)  # paused in the middle of a transaction, with more to write
        run_until_everything_is_checkpointed(
            config, PER_PARTITION
        )  # the replacement: a new generation, which fences it
        os.kill(zombie.pid, signal.SIGCONT)
        assert zombie.wait(120) != 0  # it learns it was fenced at its next append or commit
    finally:
        zombie.kill()
        zombie.wait(30)
    exact_once(config)


TIMEOUT_MS = 1_000
"""``systems.log.transaction.timeout.ms`` of the timeout tests: well above ``task.commit.ms`` (100 ms)."""


def out_partition(config: Settings) -> LogPartition:
    return LogPartition(Path(config["job.data.dir"]) / "log" / "out" / "p0.db", "out", 0)


def test_a_reader_gets_past_the_transaction_of_a_killed_job_once_it_timed_out_and_a_restart_is_exact(
    tmp_path: Path,
) -> None:
    point = "after-upload"  # the output is appended in the open transaction, its commit point not reached
    config = eos_job(
        tmp_path,
        test__delay__seconds="0.005",
        systems__log__transaction__timeout__ms=str(TIMEOUT_MS),
        **paused_at(point, tmp_path),
    )
    killed_at(config, point, tmp_path)  # and not restarted
    partition = out_partition(config)
    try:
        state = partition.state()
        assert state.written > state.upcoming == 0, "the killed container's open transaction holds the output"
    finally:
        partition.close()
    marker = {"marker": "written by another writer after the dead transaction"}
    write_stream(config, SystemStream("log", "out"), [("m", marker)])

    def readable() -> list[Any]:
        return [value for _, value in read_stream(config, SystemStream("log", "out"), idle_timeout=0.2)[0]]

    wait_until(lambda: readable() != [], 60, "a reader past the dead transaction once it timed out")
    assert readable() == [marker]  # none of the dead transaction's records
    run_until_everything_is_checkpointed(config, PER_PARTITION)  # the job restarted
    exact_once(config)


def test_a_live_container_committing_every_100_ms_is_never_aborted_by_the_timeout(tmp_path: Path) -> None:
    config = eos_job(tmp_path, test__delay__seconds="0.02", systems__log__transaction__timeout__ms=str(TIMEOUT_MS))
    done = threading.Event()

    def read_at_the_stable_end() -> None:  # a reader held by each open transaction asks whether it is due
        consumer = LogSystemFactory().get_consumer("log", config)
        consumer.register(SystemStreamPartition("log", "out", 0), "0")
        consumer.start()
        try:
            while not done.is_set():
                consumer.poll({SystemStreamPartition("log", "out", 0)}, 0.05)
        finally:
            consumer.stop()

    reader = threading.Thread(target=read_at_the_stable_end, daemon=True)
    reader.start()
    try:
        run_until_everything_is_checkpointed(config, PER_PARTITION)  # about 5 s: several timeouts long
    finally:
        done.set()
        reader.join(30)
    with sqlite3.connect(Path(config["job.data.dir"]) / "log" / FILE_NAME) as coordinator:
        assert coordinator.execute("SELECT count(*) FROM expired").fetchone() == (0,)
    coordinator.close()
    exact_once(config)
