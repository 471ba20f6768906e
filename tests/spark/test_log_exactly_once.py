"""Exactly-once on the embedded log through the Spark runner: a container SIGKILLed at a commit point, before
its transaction's commit point, is retried by Spark, and the job ends with every input's output exactly once,
every store equal to a run without faults, and every window behind a repartition emitted once, exact."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from millstream.model import SystemStream
from millstream.testing import read_stream
from tests.api.apps import app_config, messages, reference_counts
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
