"""``millstream run --in-process`` stops as gracefully as the Spark runner: on Ctrl-C or SIGTERM its
containers flush, commit and return, the command exits 0, and a rerun resumes after the checkpoint. A second
signal stops at once with exit 130, on Spark without a Java or Python stack trace."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.coordinator.prepare import load_job_config
from millstream.coordinator.status import job_status
from tests.cli.test_main import (
    _running_with_a_checkpoint,
    by_input_partition,
    millstream,
    start_job,
    table_rows,
    wait_for,
    write_config,
)
from tests.helpers import create_stream, fill, wait_until


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_an_in_process_job_with_exit_0_after_flushing_and_committing(tmp_path: Path, signum: int):
    path = write_config(tmp_path, {"task.class": "tests.jobs:SlowPassThrough", "test.delay.seconds": 0.001})
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 3000)  # unbounded: not sealed, the job would run forever
    job, stdout, stderr = start_job(path, tmp_path, "--in-process")
    try:
        wait_for(lambda: _running_with_a_checkpoint(config), timeout=60, process=job, log=stderr)
        job.send_signal(signum)
        code = job.wait(timeout=30)  # raises if the graceful stop hangs
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert code == 0, stderr.read_text()
    assert f"{signal.Signals(signum).name}: stopping containers gracefully" in stderr.read_text()
    assert "generation 1: stopped" in stdout.read_text()
    checkpointed = {row[1]: int(row[2]) for row in table_rows(millstream("checkpoint", "show", path).stdout)}
    assert set(checkpointed) == {"log.in.0", "log.in.1"}
    output = by_input_partition(config)
    for partition in (0, 1):
        # the final commit covers what the job wrote, and everything it covers reached the output
        assert set(range(checkpointed[f"log.in.{partition}"] + 1)) <= set(output[partition])
        assert max(output[partition]) == checkpointed[f"log.in.{partition}"]


def test_a_second_run_of_the_same_job_supersedes_the_first_which_says_so_and_exits_3(tmp_path: Path):
    path = write_config(tmp_path, {"task.class": "tests.jobs:SlowPassThrough", "test.delay.seconds": 0.001})
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 3000)  # unbounded: not sealed, the job would run forever
    first, _, first_err = start_job(path, tmp_path / "first", "--in-process")
    second = None
    try:
        wait_for(lambda: _running_with_a_checkpoint(config), timeout=60, process=first, log=first_err)
        second, _, second_err = start_job(path, tmp_path / "second", "--in-process")
        code = first.wait(timeout=60)
        assert code == 3, first_err.read_text()
        started = coordination_started(config, 2)
        assert (
            f"job cli-test generation 1 was superseded by generation 2 started at {started}, by another run of the "
            "same job" in first_err.read_text()
        )
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", started)
        assert "Traceback" not in first_err.read_text()
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 0, second_err.read_text()
    finally:
        for job in (first, second):
            if job is not None and job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)


@pytest.mark.spark
def test_a_second_sigint_while_a_spark_job_stops_exits_130_at_once_without_java_or_python_stack_traces(tmp_path: Path):
    """Ctrl-C in a terminal reaches the whole process group (the command, Spark's JVM, its Python workers);
    the second one must end them all quietly while the containers are still finishing their slow messages."""
    path = write_config(
        tmp_path,
        {"task.class": "tests.jobs:SlowPassThrough", "test.delay.seconds": 2, "spark.ui.enabled": "false"},
    )
    config = load_job_config(path)
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 100)  # unbounded: not sealed; 2 s a message, so stopping takes up to 2 s
    job, _, stderr = start_job(path, tmp_path)
    try:
        wait_for(lambda: _running_with_a_checkpoint(config), timeout=120, process=job, log=stderr)
        os.killpg(job.pid, signal.SIGINT)
        wait_for(lambda: "stopping containers gracefully" in stderr.read_text(), timeout=10, process=job, log=stderr)
        os.killpg(job.pid, signal.SIGINT)
        code = job.wait(timeout=10)
        wait_until(lambda: not _group_alive(job.pid), 30, "the JVM and the Python workers to end")
    finally:
        if _group_alive(job.pid):
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    text = stderr.read_text()
    assert code == 130, text
    assert "second signal: stopping without waiting" in text
    for trace in ("py4j", "java.", "Traceback", "\tat ", "Exception"):
        assert trace not in text, text


@pytest.mark.spark
def test_a_sigterm_to_the_whole_process_group_stops_a_spark_job_as_gracefully_as_one_to_the_command(
    tmp_path: Path,
):
    """``timeout``, systemd and schedulers signal the whole process group: Spark's driver JVM must survive it,
    so the containers make their final commit and the command exits 0."""
    path = write_config(
        tmp_path,
        {"task.class": "tests.jobs:SlowPassThrough", "test.delay.seconds": 0.001, "spark.ui.enabled": "false"},
    )
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 3000)  # unbounded: not sealed, the job would run forever
    job, stdout, stderr = start_job(path, tmp_path)  # in a new session: its pid is the group's id
    try:
        wait_for(lambda: _running_with_a_checkpoint(config), timeout=120, process=job, log=stderr)
        os.killpg(job.pid, signal.SIGTERM)
        code = job.wait(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert code == 0, stderr.read_text()
    assert "SIGTERM: stopping containers gracefully" in stderr.read_text()
    assert "generation 1: stopped" in stdout.read_text()
    checkpointed = {row[1]: int(row[2]) for row in table_rows(millstream("checkpoint", "show", path).stdout)}
    output = by_input_partition(config)
    for partition in (0, 1):  # the final commit covers exactly what the job wrote
        assert max(output[partition]) == checkpointed[f"log.in.{partition}"]
    states = {cid: info.get("state") for cid, info in job_status(config).containers.items()}
    assert states and "running" not in states.values(), states


def coordination_started(config: Settings, generation: int) -> str:
    """When ``generation`` of the job in ``config`` was published, as the metadata store records it."""
    store = metadata_store(config)
    try:
        started = coordination.generation_started(store, generation)
    finally:
        store.close()
    assert started is not None, f"no start time recorded for generation {generation}"
    return started


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
