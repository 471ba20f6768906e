"""A container's failure named from Spark's exception chain: the texts are real, captured from runs of
Spark 4 in local mode and on the standalone test cluster (``fixtures/failures/``), and a native crash is
named through the Spark runner, not as py4j's "An error occurred while calling ...collectAndServe"."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.model import SystemStream
from millstream.spark.run.failures import container_failure
from millstream.spark.run.runner import SparkJobRunner
from millstream.testing import write_stream
from tests.helpers import create_stream, job_config, seal

FIXTURES = Path(__file__).parent / "fixtures" / "failures"
FAULTHANDLER = {"spark.python.worker.faulthandler.enabled": "true"}


def captured(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text(encoding="utf-8")


def test_a_segfault_of_the_python_worker_is_a_native_crash_of_the_container_with_the_signal_and_its_executor():
    failure = container_failure(captured("local_segfault_faulthandler"), FAULTHANDLER)
    assert failure.kind == "crash"
    assert (failure.container, failure.executor, failure.host, failure.attempts) == (1, "driver", "192.0.2.2", 1)
    summary = failure.summary()
    assert summary.startswith("container 1 crashed natively: its Python worker died of 'Segmentation fault'")
    assert "[executor driver (local mode) on host 192.0.2.2, 1 attempt(s)]" in summary
    assert "collectAndServe" not in failure.message(verbose=False)
    verbose = failure.message(verbose=True)
    assert 'File "/tmp/capture/capture.py", line 15 in task' in verbose  # the frame it crashed in, under -v
    assert "\tat org.apache.spark" not in verbose
    assert verbose.splitlines()[1].startswith("org.apache.spark.SparkException: Job aborted due to stage failure")


def test_a_worker_that_exits_without_an_exception_is_a_crash_and_without_faulthandler_says_how_to_name_it():
    quiet = container_failure(captured("local_worker_crash_no_faulthandler"), {})
    assert quiet.kind == "crash" and quiet.container == 1
    assert "exited without a Python exception" in quiet.cause
    assert "spark.python.worker.faulthandler.enabled=true" in quiet.cause
    exited = container_failure(captured("local_os_exit_faulthandler"), FAULTHANDLER)
    assert exited.kind == "crash" and "faulthandler" not in exited.cause


def test_a_crash_under_a_pyspark_memory_cap_is_named_as_memory_with_the_key_to_raise():
    failure = container_failure(
        captured("local_os_exit_faulthandler"), {**FAULTHANDLER, "spark.executor.pyspark.memory": "1g"}
    )
    assert failure.kind == "memory"
    assert "capped at spark.executor.pyspark.memory=1g" in failure.cause
    assert failure.cause.endswith("raise spark.executor.pyspark.memory")


def test_a_memory_error_under_spark_executor_pyspark_memory_is_named_as_memory():
    failure = container_failure(captured("local_pyspark_memory_error"), {"spark.executor.pyspark.memory": "64m"})
    assert failure.kind == "memory"
    assert failure.summary() == (
        "a container ran out of memory: its Python worker raised MemoryError (spark.executor.pyspark.memory=64m); "
        "raise spark.executor.pyspark.memory or keep less in memory"
    )


def test_an_executor_killed_with_exit_code_137_is_named_as_memory_with_the_keys_to_raise():
    failure = container_failure(captured("standalone_executor_sigkill"))
    assert failure.kind == "memory"
    assert (failure.container, failure.executor, failure.host) == (1, "1", "127.0.0.1")
    for words in ("exit code 137, SIGKILL", "out-of-memory", "spark.executor.memory", "spark.executor.memoryOverhead"):
        assert words in failure.cause
    assert "[executor 1 on host 127.0.0.1, 1 attempt(s)]" in failure.summary()


def test_an_executor_lost_otherwise_is_named_as_lost_with_its_exit_code():
    failure = container_failure(captured("standalone_executor_sigterm"))
    assert failure.kind == "lost"
    assert failure.summary().startswith(
        "container 1 lost its executor (exit code 143, SIGTERM): Command exited with code 143 [executor 1"
    )


def test_a_python_exception_in_the_container_is_its_own_last_line_as_before():
    failure = container_failure(captured("local_python_exception"))
    assert failure.kind == "python"
    assert failure.summary() == "ValueError: bad record at offset 12"
    assert failure.message(verbose=True) == failure.summary()  # its traceback is the container's own, printed once


def test_a_log_location_is_given_on_its_own_line():
    failure = container_failure(captured("standalone_executor_sigterm"))
    message = failure.message(log_location="stderr of executor 1 on 127.0.0.1")
    assert message.splitlines()[1] == "executor log: stderr of executor 1 on 127.0.0.1"


@pytest.mark.spark
def test_through_spark_a_container_whose_python_worker_segfaults_is_named_as_a_native_crash_not_collect_and_serve(
    spark_local, tmp_path
):
    config = job_config(tmp_path, task="tests.jobs:CrashesOnPoison", job__container__count=2)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    write_stream(config, SystemStream("log", "in"), [("a", "ok")], partition=0)
    write_stream(config, SystemStream("log", "in"), [("b", "ok"), ("c", "segfault")], partition=1)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "failed"
    error = result.error or ""
    assert "collectAndServe" not in error
    first = error.splitlines()[0]
    assert first.startswith("container 1 crashed natively: its Python worker died of 'Segmentation fault'"), error
    assert "[executor driver (local mode) on host " in first
    assert error.splitlines()[1].startswith("executor log: the driver's stderr"), error
