"""Exactly-once on the embedded log through the Spark runner: a container SIGKILLed at a commit point, before
its transaction's commit point, is retried by Spark, and the job ends with every input's output exactly once,
every store equal to a run without faults, and every window behind a repartition emitted once, exact; a container
paused past the liveness timeout is replaced and commits nothing more."""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from pathlib import Path

import pytest

from millstream.coordinator.job_result import JobResult
from millstream.model import SystemStream
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import read_stream
from tests.api.apps import app_config, messages, reference_counts
from tests.embedded.log.test_exactly_once import PER_PARTITION as EOS_PER_PARTITION
from tests.embedded.log.test_exactly_once import eos_job, exact_once
from tests.helpers import wait_until
from tests.job_process import input_checkpointed
from tests.spark.run.test_liveness import _alive as alive
from tests.spark.run.test_liveness import _running as running
from tests.spark.test_application import output, setup
from tests.spark.test_state import PARTITIONS, PER_PARTITION, final_store_dumps, job, paused_at, reference, run_and_kill

pytestmark = pytest.mark.spark


def test_a_container_killed_at_a_commit_point_on_spark_neither_duplicates_nor_loses_output(
    spark_local, tmp_path: Path
) -> None:
    point = "after-upload"
    markers = tmp_path / "markers"
    config = job(
        tmp_path,
        "changelog",
        task__processing__guarantee="exactly-once",
        task__checkpoint__factory="log",
        task__commit__testing__pause__at=point,
        task__commit__testing__pause__ms=60_000,
        task__commit__testing__marker__dir=str(markers),
    )
    result = run_and_kill(config, spark_local, paused_at(markers, point))
    assert result.outcome == "finished", result.error
    assert max(c.epoch for c in result.containers) >= 2, "no container was retried"
    outputs = [v for _, v in read_stream(config, SystemStream("log", "out"))[0] if "store" not in v]
    copies = Counter((v["p"], v["v"]) for v in outputs)
    assert set(copies.values()) == {1}, [origin for origin, n in copies.items() if n > 1][:3]  # no duplicates
    assert set(copies) == {(p, p * 100_000 + i) for p in range(PARTITIONS) for i in range(PER_PARTITION)}
    assert final_store_dumps(config) == reference()


def test_windows_behind_a_repartition_on_spark_come_out_once_with_exact_counts_after_a_kill(
    spark_local, tmp_path: Path
) -> None:
    point = "before-snapshot"
    markers = tmp_path / "markers"
    config = app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        job__container__count=2,
        task__processing__guarantee="exactly-once",
        task__checkpoint__factory="log",
        test__delay__seconds=0.01,
        task__commit__testing__pause__at=point,
        task__commit__testing__pause__ms=60_000,
        task__commit__testing__marker__dir=str(markers),
    )
    data = {p: messages(p, 60) for p in range(2)}
    setup(config, data)
    result = run_and_kill(config, spark_local, paused_at(markers, point))
    assert result.outcome == "finished", result.error
    assert max(c.epoch for c in result.containers) >= 2, "no container was retried"
    panes = [r for r in output(config) if "count" in r]
    windows = Counter((p["user"], p["start"]) for p in panes)
    assert set(windows.values()) == {1}, [w for w, n in windows.items() if n > 1][:3]  # each window once
    assert {(p["user"], p["start"]): p["count"] for p in panes} == reference_counts(data)


def test_a_paused_container_replaced_after_the_liveness_timeout_commits_nothing_on_spark(
    spark_local, tmp_path: Path
) -> None:
    """SIGSTOP in the middle of the run, past the liveness timeout: the driver kills the container's Spark task and
    its next attempt fences the paused one and ends what it left open. Spark ends the paused Python worker when
    it kills the task (in local mode and on a cluster alike), so it is resumed only if it is still there; either
    way it commits nothing more and the output is exact. A paused attempt that does run again after its
    replacement started is refused at its next append or commit (``tests/embedded/log/test_exactly_once.py``)."""
    config = eos_job(
        tmp_path,
        test__delay__seconds="0.01",
        job__container__heartbeat__interval__ms=200,
        job__container__liveness__timeout__ms=2000,
    )
    runner = SparkJobRunner(config, spark=spark_local)
    outcome: dict[str, JobResult] = {}
    job = threading.Thread(target=lambda: outcome.setdefault("result", runner.run()), daemon=True)
    job.start()
    paused = 0
    try:
        first = wait_until(lambda: running(config, after_attempt=0), 120, "attempt 1 running")
        wait_until(lambda: input_checkpointed(config), 120, "attempt 1's first commit")
        paused = int(first["pid"])
        os.kill(paused, signal.SIGSTOP)  # mid-run, with more to write
        wait_until(lambda: running(config, after_attempt=first["attempt"]), 120, "its replacement running")
        if alive(paused):
            os.kill(paused, signal.SIGCONT)
        wait_until(lambda: not alive(paused), 120, "the paused attempt to end")
        done = {0: EOS_PER_PARTITION - 1, 1: EOS_PER_PARTITION - 1}
        wait_until(lambda: input_checkpointed(config) == done, 180, "every input checkpointed")
    finally:
        if paused and alive(paused):
            os.kill(paused, signal.SIGCONT)
        runner.request_stop()
        job.join(120)
    assert outcome["result"].outcome == "stopped", outcome["result"].error
    assert max(c.epoch for c in outcome["result"].containers) >= 2, "the paused container was not replaced"
    exact_once(config)
