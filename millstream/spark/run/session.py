"""The SparkSession a job runs in, configured for long-running container tasks.

Facts that shape it (DESIGN §9): Python workers must use the driver's interpreter; on ``local[N]``
a task beyond N waits forever for a slot, so slots are checked before launching; retries in local
mode come only from ``local[N,F]``; speculation would run a container twice.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import threading
import time
from dataclasses import dataclass

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.resource import ResourceProfile
from pyspark.sql import SparkSession

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.errors import ConfigError, MillstreamError
from millstream.spark.sources.datasource import register as register_data_sources
from millstream.spark.sources.store_datasource import register as register_store_source

_LOCAL = re.compile(r"^local\[(?P<threads>\d+|\*)(?:,\s*(?P<failures>\d+))?\]$")

log = logging.getLogger(__name__)


class JavaNotFoundError(MillstreamError):
    """Spark's driver is a JVM: without one, pyspark fails with a traceback that never names Java."""

    exit_code = 2

    def __init__(self, looked: str) -> None:
        super().__init__(
            f"Spark needs Java 17 to start, and {looked}: install a JDK 17, put its java on PATH or set JAVA_HOME "
            "(or run the job without Spark: millstream run --in-process)"
        )


def find_java() -> str:
    """The java Spark's launcher will run (``$JAVA_HOME/bin/java``, else ``java`` on PATH), or a clear error."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = os.path.join(java_home, "bin", "java")
        if os.access(java, os.X_OK):
            return java
        raise JavaNotFoundError(f"JAVA_HOME={java_home} has no executable bin/java")
    on_path = shutil.which("java")
    if on_path is None:
        raise JavaNotFoundError("there is no java on PATH and JAVA_HOME is not set")
    return on_path


@dataclass(frozen=True)
class SlotRequirement:
    containers: int
    headroom: int

    @property
    def slots(self) -> int:
        return self.containers + self.headroom


def requirement(config: Settings) -> SlotRequirement:
    job = config.job
    return SlotRequirement(job.container_count, job.slots_headroom)


def resolve_master(config: Settings, master: str | None) -> str:
    """``--master`` > ``spark.master`` > ``local[containers + headroom, retries + 1]``.

    A ``local[N]`` without a failure count gets one, so failed containers are retried as on a cluster.
    """
    job = config.job
    failures = job.container_max_attempts
    chosen = master or config.get("spark.master")
    if not chosen:
        return f"local[{requirement(config).slots},{failures}]"
    match = _LOCAL.match(chosen.strip())
    if match and match.group("failures") is None:
        return f"local[{match.group('threads')},{failures}]"
    return chosen.strip()


def local_slots(master: str) -> int | None:
    match = _LOCAL.match(master)
    if not match:
        return 1 if master == "local" else None
    threads = match.group("threads")
    return os.cpu_count() or 1 if threads == "*" else int(threads)


# Spark logs every failed attempt of a task in these loggers, each time with the Python worker's whole traceback
# and a Java stack: the runner reports the failure itself, once, naming task, stream, partition and offset.
FAILED_ATTEMPT_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.api.python",
)


def build_session(config: Config, master: str | None = None, *, verbose: bool = False) -> SparkSession:
    """Create (or join) the SparkSession for ``config``; ``spark.*`` keys pass through to Spark.

    ``config`` may be a loaded ``Config`` (a root that has not prepared the job: a user's script, a test) or the
    job's ``Settings``; it is read as settings either way, its views parsed once.

    Unless ``verbose``, Spark's own reports of failed task attempts are silenced, so that a failing job reads as
    one error rather than one traceback per attempt. With pyarrow installed the session knows
    format ``millstream`` (``spark.read.format("millstream")``), so a job's streams can be inspected in the
    session that runs it."""
    config = Settings.of(config)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    settings = session_settings(config, resolve_master(config, master))
    if settings.get("spark.speculation", "false").lower() != "false":
        raise ConfigError(
            "config key 'spark.speculation' must be false: a speculative copy would run a container twice"
        )
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    if SparkContext._active_spark_context is None:  # joining a running session needs no new JVM
        find_java()
        launch_driver_jvm(SparkConf(loadDefaults=False).setAll(list(settings.items())))
    session = builder.getOrCreate()
    register_data_sources(session, required=False)  # a job runs without pyarrow; reading needs it
    register_store_source(session, required=False)
    level = config.get("spark.log.level", "WARN")
    session.sparkContext.setLogLevel(level)
    set_failed_attempt_logging(session.sparkContext, level if verbose else "OFF")
    return session


def session_settings(config: Settings, master: str) -> dict[str, str]:
    """The settings :func:`build_session` gives a session on ``master``: millstream's own, then the config's
    ``spark.*`` keys; what the checks made before the session exists read."""
    job = config.job
    settings = {
        "spark.master": master,
        "spark.app.name": f"millstream-{job.job_key}",
        "spark.speculation": "false",
        "spark.task.maxFailures": str(job.container_max_attempts),
        "spark.pyspark.python": sys.executable,
        "spark.ui.showConsoleProgress": "false",
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        # a Python worker that crashes natively reports its signal and the Python frames it was in, which the
        # runner names instead of "Python worker exited unexpectedly (crashed)"
        "spark.python.worker.faulthandler.enabled": "true",
    }
    settings.update({k: str(v) for k, v in config.items() if k.startswith("spark.") and k != "spark.master"})
    return settings


def launch_driver_jvm(conf: SparkConf) -> None:
    """Start Spark's driver JVM in a session of its own, unless this process already has one (or was started by
    ``spark-submit``, which made the JVM first).

    pyspark starts the JVM in the CLI's process group, so a SIGTERM to the group (``timeout``, systemd, a
    scheduler) killed the JVM while the CLI was still asking its containers to commit: the job failed without its
    final commit. Out of the group, the JVM only ends when the CLI stops it or exits (it watches its stdin), and a
    group SIGTERM is as graceful as a SIGTERM to the CLI alone."""
    if SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    with SparkContext._lock:
        if SparkContext._gateway is None:
            gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})
            SparkContext._gateway = gateway
            SparkContext._jvm = gateway.jvm


def set_failed_attempt_logging(sc: SparkContext, level: str) -> None:
    """Spark's loggers of failed task attempts at ``level``: Spark's own (``spark.log.level``) with ``-v``, else OFF.

    The levels are set in the driver's JVM, which in local mode also runs the executors; on a cluster the
    executors' logs stay in their own log files, where Spark's per-attempt lines belong."""
    jvm = sc._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    for name in FAILED_ATTEMPT_LOGGERS:
        log4j.core.config.Configurator.setLevel(name, log4j.Level.toLevel(level, log4j.Level.WARN))


def check_local_slots(master: str, need: SlotRequirement) -> None:
    """Refuse a ``local[N]`` master with too few slots before a JVM is even started."""
    fixed = local_slots(master)
    if fixed is not None and fixed < need.slots:
        raise ConfigError(
            f"Spark master '{master}' offers {fixed} task slot(s), but the job needs {need.slots} "
            f"({need.containers} container(s) + {need.headroom} headroom): use local[{need.slots}] or more, "
            "or lower job.container.count / job.coordinator.slots.headroom"
        )


def check_slots(
    sc: SparkContext,
    need: SlotRequirement,
    wait_seconds: float = 30.0,
    profile: ResourceProfile | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Fail fast, never hang: the cluster must offer a task slot per container plus headroom.

    Executors register with the driver some time after the session starts, so a cluster is given
    ``wait_seconds`` to offer the slots before the job is refused, naming what it offers and the keys to change.
    Slots are those of the containers' resource ``profile`` (``job.container.cpus``) when they run under one.
    A ``stop`` set meanwhile (a signal) ends the wait at once, returning the slots offered so far: the runner then
    stops before launching anything, rather than after the whole wait."""
    master = str(sc.master)
    fixed = local_slots(master)
    if fixed is not None:
        check_local_slots(master, need)
        return fixed
    requested = request_executors(sc, need) if profile is None and dynamic_allocation(sc.getConf()) else None
    deadline = time.monotonic() + wait_seconds
    while True:
        slots = cluster_slots(sc, profile)
        if slots >= need.slots or (stop is not None and stop.is_set()):
            return slots
        if time.monotonic() >= deadline:
            asked = f" ({requested} executor(s) requested by dynamic allocation)" if requested is not None else ""
            raise ConfigError(
                f"Spark master '{master}' offers {slots} task slot(s){asked} after waiting {wait_seconds:g}s, but the "
                f"job needs {need.slots} ({need.containers} container(s) + {need.headroom} headroom; a slot is "
                f"{_slot_cpus(sc, profile)} executor core(s)): give the job more executor cores "
                "(spark.executor.cores, spark.executor.instances, spark.cores.max), or lower job.container.count / "
                "job.coordinator.slots.headroom, or wait longer with job.coordinator.slots.wait.ms"
            )
        time.sleep(0.5)


def dynamic_allocation(conf: SparkConf) -> bool:
    """Whether Spark adds executors as the job asks: the slot check must ask before it counts."""
    return (conf.get("spark.dynamicAllocation.enabled") or "false").lower() == "true"


def request_executors(sc: SparkContext, need: SlotRequirement) -> int:
    """Ask dynamic allocation for enough executors of the default profile to offer ``need``'s slots, now.

    Left alone, Spark requests executors only once the containers' stage has pending tasks, and then only for
    the tasks, not the headroom: the slot check would refuse a cluster that could run the job. Executors are
    counted as ``spark.executor.cores`` (1 unless set, Spark's own assumption for dynamic allocation) divided by
    ``spark.task.cpus``; a ``spark.dynamicAllocation.maxExecutors`` that cannot reach the slots is refused at
    once, as no wait would help. Headroom executors idle until a container needs them, and Spark releases them
    after ``spark.dynamicAllocation.executorIdleTimeout``. Returns the executors requested."""
    conf = sc.getConf()
    cores = int(conf.get("spark.executor.cores") or "1")
    task_cpus = int(conf.get("spark.task.cpus") or "1")
    per_executor = max(cores // task_cpus, 1)
    executors = -(-need.slots // per_executor)
    initial = ("minExecutors", "initialExecutors")  # Spark's own first target, which the request must not lower
    executors = max(executors, *(int(conf.get(f"spark.dynamicAllocation.{key}") or "0") for key in initial))
    maximum = conf.get("spark.dynamicAllocation.maxExecutors")
    if maximum is not None and int(maximum) < executors:
        raise ConfigError(
            f"Spark master '{sc.master}' may start at most spark.dynamicAllocation.maxExecutors={maximum} "
            f"executor(s) of {per_executor} task slot(s) (spark.executor.cores={cores} / spark.task.cpus="
            f"{task_cpus}), {int(maximum) * per_executor} slot(s), but the job needs {need.slots} "
            f"({need.containers} container(s) + {need.headroom} headroom): raise spark.dynamicAllocation.maxExecutors "
            f"to at least {executors} (or spark.executor.cores), or lower job.container.count / "
            "job.coordinator.slots.headroom"
        )
    jvm = sc._jvm
    assert jvm is not None
    no_locality = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
    if not sc._jsc.sc().requestTotalExecutors(executors, 0, no_locality):
        raise ConfigError(
            f"Spark master '{sc.master}' does not take executor requests (its scheduler backend is no allocation "
            "client): unset spark.dynamicAllocation.enabled and give the job executors up front"
        )
    log.info("requested %d executor(s) of %d slot(s) for %d task slot(s)", executors, per_executor, need.slots)
    return executors


def cluster_slots(sc: SparkContext, profile: ResourceProfile | None = None) -> int:
    """Tasks the registered executors can run at once under the default resource profile: Spark's own count
    (each executor's cores divided by ``spark.task.cpus``, and by any other task resource), the figure its
    scheduler uses to place tasks, so a container counted here is never left waiting for a slot. Under a task
    resource ``profile`` the same count with the profile's cpus per task."""
    context = sc._jsc.sc()
    if profile is not None and profile._java_resource_profile is not None:
        return int(context.maxNumConcurrentTasks(profile._java_resource_profile))
    return int(context.maxNumConcurrentTasks(context.resourceProfileManager().defaultResourceProfile()))


def _slot_cpus(sc: SparkContext, profile: ResourceProfile | None) -> str:
    cpus = profile.taskResources.get("cpus") if profile is not None else None
    if cpus is not None:
        return f"job.container.cpus={cpus.amount:g}"
    return f"spark.task.cpus={int(sc.getConf().get('spark.task.cpus', '1') or '1')}"


def abandon_session() -> None:
    """End the JVM this process started for Spark at once and without a word: the user asked twice to stop.

    A graceful ``stop()`` would wait for the containers; letting the interpreter exit instead leaves the JVM to
    shut down on its own, logging every task it kills with a Java stack trace, while the thread waiting in
    py4j logs a traceback of its own. Killing the JVM leaves nothing to log, and Python's logging is switched
    off first so the waiting thread's py4j error is not printed either. Checkpoints are unaffected: a
    container killed between commits resumes from its last one.
    """
    logging.disable(logging.CRITICAL)
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None) if gateway is not None else None
    if process is not None:
        process.kill()
        process.wait()
