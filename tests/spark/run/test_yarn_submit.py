"""A job submitted with ``spark-submit --master yarn`` to a mini YARN cluster (a ResourceManager and two
NodeManagers on 127.0.0.1, tests/spark/yarn.py): client mode, cluster mode, and cluster mode with the job's
Python environment shipped as a packed venv, each checked message by message; and the submitted session's
guard (a refusal) as each deploy mode reports it. These run what docs/spark.md gives as the YARN recipe.
One cluster for the module; each job is small (400 messages), as the whole module must stay within minutes.

The task module is shipped with ``--py-files`` from a folder of its own (not the config's, which the workers
also import from), and spark-submit runs without this checkout on PYTHONPATH, so the job finds its code only
the way the recipe ships it. All NodeManagers share this machine's disk, hence ``job.shared.filesystem``.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import venv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

import millstream.spark.submit
from millstream.config.settings import Settings
from millstream.model import SystemStream
from millstream.testing import read_stream
from tests.cli.test_main import wait_for
from tests.helpers import create_stream, fill, job_config, output_origins, seal
from tests.packaging.built_wheel import session_wheel
from tests.spark.submit_signals import (
    SubmittedJob,
    assert_stopped_after_a_final_commit,
    expected_exit_code,
    running_with_a_checkpoint,
    stop_with_signal,
    unbounded_job,
)
from tests.spark.yarn import SPARK_HOME, YarnCluster

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
OUTPUT = SystemStream("log", "out")
# A job refused before any task needs no executors: its session need not wait for them to register.
NO_EXECUTOR_WAIT = {"spark.scheduler.minRegisteredResourcesRatio": "0"}
SITE_PACKAGES = f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"

TASK_MODULE = '''\
"""The job's code: shipped to the driver and the executors with --py-files."""

import sys

import millstream
from millstream import OutgoingMessageEnvelope, StreamTask, SystemStream

OUTPUT = SystemStream("log", "out")
# The driver imports this module to check task.class: its log says which environment's Python that was.
print(f"yarn_tasks imported by the Python of {sys.prefix}", flush=True)


class Tagged(StreamTask):
    """Copies each message with where it came from and which environment's Python and millstream ran it."""

    def process(self, envelope, collector, coordinator):
        origin = {"p": envelope.ssp.partition, "o": envelope.offset, "v": envelope.message}
        origin["python"] = sys.prefix
        origin["millstream"] = millstream.__file__
        collector.send(OutgoingMessageEnvelope(OUTPUT, origin, key=envelope.key))
'''


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()  # nothing here runs Spark in process, but a leftover session holds memory and ports
    with YarnCluster(tmp_path_factory.mktemp("yarn"), node_managers=2) as cluster:
        yield cluster


@pytest.fixture
def job(tmp_path: Path) -> tuple[Settings, Path, Path, set[tuple[int, int]]]:
    """A pass-through job of 2 containers over 4 partitions: its config, config file, task module, input."""
    config = job_config(
        tmp_path / "data",
        task="yarn_tasks:Tagged",
        job__container__count=2,
        job__coordinator__slots__headroom=0,
        job__shared__filesystem=True,  # the log system and SQLite metadata: the NodeManagers share this disk
        job__coordinator__slots__wait__ms=120_000,  # YARN containers take a while to start on a loaded machine
    )
    create_stream(config, "in", 4)
    create_stream(config, "out", 4)
    written = fill(config, "in", 4, 100)
    seal(config, "in")
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "job.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()), encoding="utf-8")
    (tmp_path / "code").mkdir()
    module = tmp_path / "code" / "yarn_tasks.py"
    module.write_text(TASK_MODULE, encoding="utf-8")
    return config, path, module, written


def spark_submit(
    cluster: YarnCluster,
    name: str,
    deploy_mode: str,
    program: list[str],
    cwd: Path,
    conf: Mapping[str, str],
    **shipped: str,
) -> subprocess.CompletedProcess[str]:
    """``spark-submit --master yarn``, run to its end: see :func:`submit_command`."""
    command, env = submit_command(cluster, name, deploy_mode, program, conf, **shipped)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=420, check=False)


def submit_command(
    cluster: YarnCluster, name: str, deploy_mode: str, program: list[str], conf: Mapping[str, str], **shipped: str
) -> tuple[list[str], dict[str, str]]:
    """``spark-submit --master yarn`` with ``--conf`` for each of ``conf`` and ``--<option> <value>`` for each of
    ``shipped`` (``py_files=`` is ``--py-files``), plus what every run on this cluster needs: 2 executors of 1 core
    (the job's 2 slots), small memory, Spark's JARs from pyspark's installation (``local:``, so not uploaded per
    application), the staging directory in the cluster's work directory, every process on 127.0.0.1; and the
    environment to run it in."""
    settings = {
        "spark.yarn.jars": f"local:{SPARK_HOME}/jars/*",
        "spark.yarn.stagingDir": f"file://{cluster.work_dir / 'staging'}",
        "spark.yarn.appMasterEnv.SPARK_LOCAL_IP": "127.0.0.1",
        "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
        "spark.ui.enabled": "false",
        **({"spark.driver.host": "127.0.0.1"} if deploy_mode == "client" else {}),
        **conf,
    }
    command = [
        str(SPARK_HOME / "bin" / "spark-submit"),
        "--master", "yarn",
        "--deploy-mode", deploy_mode,
        "--name", name,
        "--num-executors", "2",
        "--executor-cores", "1",
        "--executor-memory", "512m",
        "--driver-memory", "512m",
    ]  # fmt: skip
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    for option, value in shipped.items():
        command += [f"--{option.replace('_', '-')}", value]
    env = cluster.env()
    env.pop("PYTHONPATH", None)  # the job's code reaches the driver and the executors through --py-files only
    return [*command, *program], env


def application(cluster: YarnCluster, submitted: subprocess.CompletedProcess[str]) -> Mapping[str, Any]:
    """The ResourceManager's record of the application spark-submit reported submitting."""
    found = re.search(r"Submitted application (application_\d+_\d+)", submitted.stderr)
    assert found, submitted.stderr[-3000:]
    (app,) = [app for app in cluster.applications() if app["id"] == found.group(1)]
    return app


def failure(submitted: subprocess.CompletedProcess[str]) -> str:
    # spark-submit runs the Python driver with its stderr joined to its stdout
    errors = [line for line in submitted.stdout.splitlines() if line.startswith(("error:", "job failed:"))]
    return "\n".join(errors) or submitted.stderr[-3000:]


def am_container(app: Mapping[str, Any]) -> str:
    """The id of the application master's container (``amContainerLogs`` ends ``/<container>/<user>``)."""
    return str(app["amContainerLogs"]).rstrip("/").rsplit("/", 2)[-2]


def executor_containers(cluster: YarnCluster, app: Mapping[str, Any]) -> set[str]:
    """The application's containers besides the application master's: its executors."""
    return set(cluster.container_output(app["id"], "stderr")) - {am_container(app)}


def test_spark_submit_in_yarn_client_mode_runs_the_job_with_executors_in_yarn_containers(cluster, job, tmp_path):
    config, path, module, written = job
    submitted = spark_submit(
        cluster,
        "millstream-yarn-client",
        "client",
        [millstream.spark.submit.__file__, str(path)],
        cwd=tmp_path,
        conf={"spark.pyspark.python": sys.executable},  # the driver's Python too, unless spark.pyspark.driver.python
        py_files=str(module),
    )

    assert submitted.returncode == 0, failure(submitted)
    assert "job test generation 1: finished on yarn" in submitted.stdout, submitted.stdout
    assert sorted(output_origins(config)) == sorted(written)
    app = application(cluster, submitted)
    assert (app["name"], app["state"], app["finalStatus"]) == ("millstream-yarn-client", "FINISHED", "SUCCEEDED")
    assert len(executor_containers(cluster, app)) == 2


def test_a_job_refused_in_yarn_cluster_mode_fails_the_application_and_spark_submit_with_the_reason_in_the_driver_log(
    cluster, job, tmp_path
):
    _, path, module, _ = job
    submitted = spark_submit(
        cluster,
        "millstream-yarn-refused",
        "cluster",
        [millstream.spark.submit.__file__, "job.yaml"],
        cwd=tmp_path,
        conf={"spark.pyspark.python": sys.executable, "spark.speculation": "true", **NO_EXECUTOR_WAIT},
        files=str(path),
        py_files=str(module),
    )

    # spark-submit's exit code is the application's final status (1: failed); the driver's 2 is in the diagnostics
    assert submitted.returncode == 1, submitted.stderr[-3000:]
    assert "User application exited with status 2" in submitted.stderr
    app = application(cluster, submitted)
    # refused before the SparkContext exists (no executors asked for): YARN reports the AM container's exit,
    # whose log holds the driver's status
    assert app["finalStatus"] == "FAILED"
    assert "User application exited with status 2" in app["diagnostics"], app["diagnostics"][-2000:]
    driver = cluster.container_output(app["id"])[am_container(app)]  # the Python driver's stderr joins its stdout
    assert "error: spark.speculation is enabled in the submitted session" in driver, driver[-3000:]


@pytest.fixture(scope="module")
def packed_venv(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """``env.tar.gz``: a fresh venv with millstream installed from this checkout's wheel (not editable: venv-pack
    refuses those; the session's one build, see ``tests/packaging/built_wheel.py``), packed with venv-pack. Its
    Python is this machine's, as venv-pack leaves the interpreter out: every node needs the same Python at the same
    path. pyspark's JARs (over 400 MB of the 500) stay out: on YARN the JVMs run the JARs of ``spark.yarn.jars``, and
    the Python driver joins its JVM instead of starting one, so nothing reads them; with them, YARN spends a minute
    unpacking the archive for each application."""
    root = tmp_path_factory.mktemp("packed-venv")
    venv.create(root / "env", with_pip=True)
    pip = [str(root / "env" / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, str(session_wheel(tmp_path_factory, worker_id))], check=True, capture_output=True, timeout=600
    )
    pack = [
        str(Path(sys.executable).parent / "venv-pack"),
        "-q",
        "-p",
        str(root / "env"),
        "-o",
        str(root / "env.tar.gz"),
    ]
    subprocess.run(
        [*pack, "--exclude", "lib/python*/site-packages/pyspark/jars/*", "--exclude", "*/__pycache__/*"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return root / "env.tar.gz"


def test_spark_submit_in_yarn_cluster_mode_runs_the_driver_and_executors_in_the_packed_venv_with_the_shipped_config(
    cluster, job, tmp_path, packed_venv
):
    """Cluster mode: the driver runs in the application master's container, with the job's config shipped by
    ``--files`` and read from that container's working directory, and it and the executors run the Python of
    ``spark.pyspark.python``: the venv YARN unpacked into each container."""
    config, path, module, written = job
    submitted = spark_submit(
        cluster,
        "millstream-yarn-packed-venv",
        "cluster",
        # the entry point from the checkout: spark-submit ships it; the driver imports millstream from the env
        [millstream.spark.submit.__file__, "job.yaml"],
        cwd=tmp_path,
        conf={"spark.pyspark.python": "./env/bin/python"},
        archives=f"{packed_venv}#env",
        files=str(path),
        py_files=str(module),
    )

    assert submitted.returncode == 0, failure(submitted)
    app = application(cluster, submitted)
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED")
    assert sorted(output_origins(config)) == sorted(written)
    ran_in = {
        (value["python"], value["millstream"]) for pairs in read_stream(config, OUTPUT).values() for _, value in pairs
    }
    # each executor's Python worker: the venv YARN unpacked into its container as ./env, and millstream from it
    assert len(ran_in) == 2, ran_in
    for prefix, package in ran_in:
        assert re.search(r"/container_\d+_\d+_\d+_\d+/env$", prefix), prefix
        assert package == f"{prefix}/{SITE_PACKAGES}/millstream/__init__.py", package
    # the driver's Python: the venv unpacked into the application master's container
    assert len(executor_containers(cluster, app)) == 2
    driver = cluster.container_output(app["id"])[am_container(app)]
    assert "job test generation 1: finished on yarn" in driver, driver
    assert f"imported by the Python of {cluster.work_dir}/" in driver, driver
    assert re.search(rf"imported by the Python of \S+/{am_container(app)}/env\n", driver), driver


def test_a_job_refused_in_yarn_client_mode_exits_spark_submit_with_the_refusals_exit_code(cluster, job, tmp_path):
    _, path, module, _ = job
    submitted = spark_submit(
        cluster,
        "millstream-yarn-refused-client",
        "client",
        [millstream.spark.submit.__file__, str(path)],
        cwd=tmp_path,
        conf={"spark.pyspark.python": sys.executable, "spark.speculation": "true", **NO_EXECUTOR_WAIT},
        py_files=str(module),
    )

    # the driver is spark-submit's own process: its exit code is millstream run's
    assert submitted.returncode == 2, submitted.stderr[-3000:]
    assert "error: spark.speculation is enabled in the submitted session" in submitted.stdout, submitted.stdout


def tagged_unbounded_job(tmp_path: Path) -> tuple[Settings, Path, Path]:
    """An unbounded job of ``yarn_tasks:Tagged`` on the shared disk, its config file and the task's module."""
    config, path = unbounded_job(
        tmp_path / "data",
        tmp_path / "conf",
        task="yarn_tasks:Tagged",
        job__shared__filesystem=True,  # the log system and SQLite metadata: the NodeManagers share this disk
        job__coordinator__slots__wait__ms=120_000,
    )
    (tmp_path / "code").mkdir()
    module = tmp_path / "code" / "yarn_tasks.py"
    module.write_text(TASK_MODULE, encoding="utf-8")
    return config, path, module


def test_a_sigterm_to_spark_submit_in_yarn_client_mode_stops_the_job_after_the_containers_final_commit(
    cluster, tmp_path
):
    """systemd's and ``timeout``'s way: the whole process group, spark-submit's JVM and the Python driver."""
    config, path, module = tagged_unbounded_job(tmp_path)
    command, env = submit_command(
        cluster,
        "millstream-yarn-sigterm",
        "client",
        [millstream.spark.submit.__file__, str(path)],
        conf={"spark.pyspark.python": sys.executable},
        py_files=str(module),
    )
    # the driver's millstream is this checkout's (the stop is the driver's), the job's code still comes by --py-files
    job = SubmittedJob.start(command, tmp_path, {**env, "PYTHONPATH": str(REPO)}, tmp_path / "logs")
    try:
        code = stop_with_signal(job, config, "group", signal.SIGTERM, startup_s=240)
    finally:
        job.kill()
    assert code == expected_exit_code("group", signal.SIGTERM), job.text()[-4000:]
    assert_stopped_after_a_final_commit(config, job.text())
    found = re.search(r"Submitted application (application_\d+_\d+)", job.text())
    assert found, job.text()[-3000:]
    (app,) = [app for app in cluster.applications() if app["id"] == found.group(1)]
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app


def test_millstream_job_stop_stops_a_job_in_yarn_cluster_mode_after_the_containers_final_commit(cluster, tmp_path):
    """In cluster mode no signal reaches the driver (spark-submit is only a client, and YARN kills the executors
    with the application master): the stop is written to the metadata store, and the application succeeds."""
    config, path, module = tagged_unbounded_job(tmp_path)
    command, env = submit_command(
        cluster,
        "millstream-yarn-cluster-stop",
        "cluster",
        [millstream.spark.submit.__file__, "job.yaml"],
        # the driver's millstream is this checkout's, the job's code still comes by --py-files
        conf={"spark.pyspark.python": sys.executable, "spark.yarn.appMasterEnv.PYTHONPATH": str(REPO)},
        files=str(path),
        py_files=str(module),
    )
    job = SubmittedJob.start(command, tmp_path, env, tmp_path / "logs")
    try:
        wait_for(lambda: running_with_a_checkpoint(config), timeout=240, process=job.process, log=job.output)
        stopped = subprocess.run(
            [sys.executable, "-m", "millstream.cli.main", "job", "stop", "--wait", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        code = job.process.wait(timeout=120)  # spark-submit follows the application to its end
    finally:
        job.kill()
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "stop requested for generation 1 (2 container(s) active)" in stopped.stdout, stopped.stdout
    assert code == 0, job.text()[-4000:]
    assert_stopped_after_a_final_commit(config, job.text())
    found = re.search(r"Submitted application (application_\d+_\d+)", job.text())
    assert found, job.text()[-3000:]
    (app,) = [app for app in cluster.applications() if app["id"] == found.group(1)]
    assert (app["state"], app["finalStatus"]) == ("FINISHED", "SUCCEEDED"), app
    driver = cluster.container_output(app["id"])[am_container(app)]
    assert "job test generation 1: stopped on yarn" in driver, driver[-3000:]
