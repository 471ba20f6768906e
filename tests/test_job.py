"""``millstream.Job``: the façade users (and the CLI) act on a job through: built once from a file or a mapping,
run in-process or on Spark, stopped, reset, and its streams, startpoints and checkpoints reached through it."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from millstream import Job, JobResult, SystemStream
from millstream.config.settings import Settings
from millstream.errors import ConfigError
from millstream.job import StopRefusedError
from millstream.operators.planner import require_expanded
from millstream.startpoint import StartpointOldest
from tests.api.apps import messages
from tests.helpers import wait_until

PASS_THROUGH = {
    "job.name": "facade",
    "job.container.count": "2",
    "task.class": "tests.jobs:PassThrough",
    "task.inputs": "log.in",
    "task.commit.ms": "200",
    "systems.log.samza.factory": "log",
    "systems.log.samza.offset.default": "oldest",
    "systems.log.samza.key.serde": "string",
    "systems.log.samza.msg.serde": "json",
}


def pass_through(data_dir: Path, **extra: Any) -> dict[str, Any]:
    return {**PASS_THROUGH, "job.data.dir": str(data_dir), **extra}


def with_input(job: Job, per_partition: int, *, sealed: bool = True) -> None:
    job.streams.create("log.in", 2)
    job.streams.create("log.out", 1)
    for partition in (0, 1):
        job.streams.write("in", [(f"k{partition}", i) for i in range(per_partition)], partition=partition)
    if sealed:
        job.streams.seal("log.in")


def test_a_job_built_from_a_mapping_runs_in_process_and_its_streams_checkpoints_and_status_show_the_run(tmp_path):
    job = Job(pass_through(tmp_path))
    with_input(job, 5)
    assert "in" in job.streams.list() and job.streams.describe("log.in").partition_count == 2  # type: ignore[union-attr]

    result = job.run("in-process", timeout=60)

    assert isinstance(result, JobResult) and result.outcome == "finished", result.error
    origins = sorted((value["p"], value["v"]) for _, value in job.streams.read(SystemStream("log", "out"))[0])
    assert origins == [(p, i) for p in (0, 1) for i in range(5)]
    assert {ssp.key() for checkpoint in job.checkpoints.show().values() for ssp in checkpoint.offsets} == {
        "log.in.0",
        "log.in.1",
    }
    status = job.status()
    assert status.model is not None and status.generation == 1
    assert [row.lag for row in status.lag] == [0, 0]


def test_reset_deletes_the_checkpoints_so_the_next_run_reads_its_input_again(tmp_path):
    job = Job(pass_through(tmp_path))
    with_input(job, 3)
    assert job.run("in-process", timeout=60).outcome == "finished"
    assert job.reset(dry_run=True).lines() and job.checkpoints.show(), "a dry run deletes nothing"

    job.reset()

    assert job.checkpoints.show() == {}
    assert job.run("in-process", timeout=60).messages == 6, "the second run read the input from its start"


def test_stop_from_another_thread_stops_the_run_of_this_job_gracefully(tmp_path):
    job = Job(pass_through(tmp_path))
    with_input(job, 3, sealed=False)  # unbounded: only a stop ends the run
    outcome: list[JobResult] = []
    running = threading.Thread(target=lambda: outcome.append(job.run("in-process", timeout=120)))
    running.start()
    wait_until(lambda: len(job.streams.read("out", idle_timeout=0.2).get(0, [])) == 6, 60, "the input processed")

    assert job.stop() is None, "this object's own run is told directly"
    running.join(60)

    assert outcome and outcome[0].outcome == "stopped", outcome


def test_stop_of_a_job_that_is_not_running_is_refused_and_names_the_job(tmp_path):
    with pytest.raises(StopRefusedError, match="job 'facade' is not running"):
        Job(pass_through(tmp_path)).stop()


def test_startpoints_are_set_shown_and_cleared_through_the_job(tmp_path):
    job = Job(pass_through(tmp_path))
    with_input(job, 1)

    written = job.startpoints.set("log.in", StartpointOldest(), partitions=[1])

    assert [ssp.key() for ssp in written] == ["log.in.1"]
    assert [entry.ssp.key() for entry in job.startpoints.show().pending] == ["log.in.1"]
    assert job.startpoints.clear("log.in") == 1 and job.startpoints.show().pending == []


def test_a_high_level_application_given_unprepared_runs_and_plans_through_the_job(tmp_path):
    """The config a new user loads (``app.class``, nothing expanded) is prepared by the job itself."""
    config = tmp_path / "job.yaml"
    settings = {"job.name": "facade-app", "job.data.dir": str(tmp_path), "app.class": "tests.api.apps:TwoHops"}
    settings |= {"systems.log.samza.factory": "log", "systems.log.samza.offset.default": "oldest"}
    config.write_text(yaml.safe_dump(settings), encoding="utf-8")
    job = Job.from_file(config, {"task.commit.ms": 200})
    job.streams.create("log.in", 2)
    job.streams.create("log.out", 1)
    for partition in (0, 1):
        job.streams.write("log.in", messages(partition, 4), partition=partition)
    job.streams.seal("log.in")

    plan = job.plan()
    result = job.run("in-process", timeout=120)

    assert plan.graph.stage_count == 3 and plan.streams[SystemStream("log", "in")].partitions == 2
    assert result.outcome == "finished", result.error
    assert sum(len(pairs) for pairs in job.streams.read("log.out").values()) == 8


def test_a_bad_key_fails_when_the_job_is_built_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"job\.container\.cuont"):
        Job(pass_through(tmp_path, **{"job.container.cuont": "2"}))


@pytest.mark.parametrize(
    ("runner", "options", "problem"),
    [
        ("threads", {}, "'spark' or 'in-process'"),
        ("in-process", {"master": "local[2]"}, "takes no Spark master"),
        ("spark", {"timeout": 5}, "applies to runner='in-process' only"),
    ],
)
def test_run_refuses_an_unknown_runner_or_options_of_the_other_runner(tmp_path, runner, options, problem):
    with pytest.raises(ConfigError, match=problem):
        Job(pass_through(tmp_path)).run(runner, **options)


def test_plan_of_a_job_without_an_application_is_refused_naming_app_class(tmp_path):
    with pytest.raises(ConfigError, match=r"names no application \(app.class\)"):
        Job(pass_through(tmp_path)).plan()


def test_the_error_for_an_unexpanded_application_names_the_public_way_not_an_internal_module():
    with pytest.raises(ConfigError) as raised:
        require_expanded(Settings({"app.class": "tests.api.apps:WindowedCount"}))
    assert "millstream.Job" in str(raised.value) and "coordinator" not in str(raised.value)


def test_importing_millstream_and_reaching_job_does_not_import_pyspark():
    probe = "import sys, millstream; millstream.Job; millstream.JobResult; print('pyspark' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_job_from_a_file_runs_on_local_spark(spark_local, tmp_path):
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(pass_through(tmp_path)), encoding="utf-8")
    job = Job.from_file(config)
    with_input(job, 4)

    result = job.run(spark=spark_local)

    assert result.outcome == "finished", result.error
    assert len(result.containers) == 2 and result.messages == 8
    assert sorted(v["v"] for _, v in job.streams.read("log.out")[0]) == sorted([*range(4), *range(4)])
