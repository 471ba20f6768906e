"""The spark-submit entry point refuses a submitted session it cannot run a job in safely, naming the --conf
to pass: it cannot change a running SparkContext's conf, only verify it. Through a real spark-submit, what the
submitted conf and the config alone decide is refused before a SparkContext exists."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark import SparkConf

import millstream.spark.submit
from millstream.errors import ConfigError
from millstream.spark.run.submit import check_submitted_conf
from tests.cli.test_main import REPO, write_config
from tests.helpers import job_config
from tests.integration.processes import free_port
from tests.spark.submit_signals import (
    SubmittedJob,
    assert_stopped_after_a_final_commit,
    expected_exit_code,
    stop_with_signal,
    unbounded_job,
)
from tests.spark.yarn import SPARK_HOME


def test_spark_submit_refuses_a_submitted_session_whose_task_retries_do_not_match_the_job(tmp_path):
    config = job_config(tmp_path, job__container__retry__count=5)
    conf = SparkConf(loadDefaults=False).setAll([("spark.master", "spark://cluster.example:7077")])
    with pytest.raises(ConfigError, match=r"--conf spark\.task\.maxFailures=6"):
        check_submitted_conf(conf, config)
    with pytest.raises(ConfigError, match=r"--conf spark\.speculation=false"):
        check_submitted_conf(conf.set("spark.speculation", "true"), config)
    check_submitted_conf(conf.set("spark.speculation", "false").set("spark.task.maxFailures", "6"), config)


def _spark_submit(tmp_path: Path, config: Path, *conf: str) -> subprocess.CompletedProcess[str]:
    """``spark-submit`` of the entry point on ``config`` to a standalone master nobody runs (a session would wait
    for it for a minute and more before failing), this checkout and interpreter on the driver's path."""
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", f"spark://127.0.0.1:{free_port()}"]
    for setting in ("spark.pyspark.python", "spark.pyspark.driver.python"):
        command += ["--conf", f"{setting}={sys.executable}"]
    for setting in conf:
        command += ["--conf", setting]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    submit_py = Path(millstream.spark.submit.__file__)
    return subprocess.run(
        [*command, str(submit_py), str(config)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )


def test_spark_submit_refuses_host_local_state_before_the_session_asks_a_cluster_for_executors(tmp_path):
    submitted = _spark_submit(tmp_path, write_config(tmp_path), "spark.task.maxFailures=4")
    assert submitted.returncode == 2, submitted.stdout + submitted.stderr
    text = " ".join((submitted.stdout + submitted.stderr).split())  # spark-submit joins the driver's stderr to stdout
    assert "runs containers on several hosts" in text and "task.inputs=log.in" in text, text
    assert "metadata.store.factory=sqlite (the default)" in text and "job.shared.filesystem=true" in text
    assert "Running Spark version" not in text, "a SparkContext was created before the refusal"


def test_spark_submit_refuses_dynamic_allocation_sizing_before_the_session_asks_a_cluster_for_executors(tmp_path):
    config = write_config(tmp_path, {"job.shared.filesystem": True, "job.container.cpus": 2})
    submitted = _spark_submit(
        tmp_path,
        config,
        "spark.task.maxFailures=4",
        "spark.dynamicAllocation.enabled=true",
        "spark.cores.max=1",
    )
    assert submitted.returncode == 2, submitted.stdout + submitted.stderr
    text = " ".join((submitted.stdout + submitted.stderr).split())  # spark-submit joins the driver's stderr to stdout
    assert "spark.cores.max=1" in text and "needs an executor of 2 core(s) (job.container.cpus)" in text, text
    assert "Running Spark version" not in text, "a SparkContext was created before the refusal"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "signum"),
    [("jvm", signal.SIGTERM), ("python", signal.SIGTERM), ("group", signal.SIGTERM), ("group", signal.SIGINT)],
    ids=["SIGTERM-jvm", "SIGTERM-python-driver", "SIGTERM-process-group", "SIGINT-process-group"],
)
def test_a_signal_to_spark_submit_in_local_mode_stops_the_job_after_the_containers_final_commit(
    tmp_path: Path, target: str, signum: int
):
    config, path = unbounded_job(tmp_path / "data", tmp_path / "conf")
    command = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[2]"]
    for setting in ("spark.pyspark.python", "spark.pyspark.driver.python"):
        command += ["--conf", f"{setting}={sys.executable}"]
    command += ["--conf", "spark.ui.enabled=false", str(Path(millstream.spark.submit.__file__)), str(path)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable}
    job = SubmittedJob.start(command, REPO, env, tmp_path / "logs")
    try:
        code = stop_with_signal(job, config, target, signum, startup_s=120)
    finally:
        job.kill()
    assert code == expected_exit_code(target, signum), job.text()[-4000:]
    assert "stopping containers gracefully" in job.text()
    assert_stopped_after_a_final_commit(config, job.text())
