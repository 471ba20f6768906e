"""Run a job on Spark: the driver is the job coordinator, each container one long-running Spark task.

Stopping is ours, not Spark's: cancelling a Spark job SIGKILLs the Python workers, so a graceful
stop (Ctrl-C, SIGTERM, :meth:`SparkJobRunner.request_stop`) writes a stop signal to the metadata
store; containers see it within a second, commit and return. Cancellation remains the last resort
after ``job.coordinator.stop.timeout.ms``.

A failure of user code that repeats at the same offset is deterministic (``job.container.failure.repeat.limit``):
the failing container records it, and the driver stops the other containers and fails the job with its message
instead of waiting for Spark to exhaust its retries.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
from pyspark.sql import SparkSession

from millstream.config import Config, JobConfig
from millstream.config.views import MetricsConfig
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.job_result import JobResult, generation_result
from millstream.coordinator.prepare import prepare
from millstream.coordinator.signals import graceful_stop_on_signals
from millstream.coordinator.status_document import status_document
from millstream.job_model import JobModel
from millstream.metadata import coordination
from millstream.metadata.factory import metadata_store
from millstream.metrics.server import metrics_endpoint
from millstream.runtime.container import ContainerResult
from millstream.runtime.heartbeat import driver_heartbeat
from millstream.spark.affinity import PlacementRecorder, container_rdd, launch_locations
from millstream.spark.container_task import container_partition
from millstream.spark.failures import describe_failure
from millstream.spark.liveness import LivenessMonitor
from millstream.spark.multi_host import refuse_host_local_state
from millstream.spark.progress import SparkProgress, status_url
from millstream.spark.resources import (
    ContainerResources,
    await_container_executors,
    check_container_memory,
    check_dynamic_allocation_sizing,
    container_resources,
    explain_memory_failure,
)
from millstream.spark.session import (
    abandon_session,
    build_session,
    check_local_slots,
    check_slots,
    requirement,
    resolve_master,
    session_settings,
)

log = logging.getLogger(__name__)


class SparkJobRunner:
    def __init__(
        self, config: Config, *, master: str | None = None, spark: SparkSession | None = None, verbose: bool = False
    ) -> None:
        self.config = prepare(config)
        self.master = master
        self.verbose = verbose
        self._spark = spark
        self._stop = threading.Event()
        self.store = metadata_store(config)
        self.generation = 0
        self._status_url: str | None = None
        self._progress: SparkProgress | None = None
        self._resources = ContainerResources(None, 1)
        self._locations: dict[int, list[str]] = {}

    def run(self, *, handle_signals: bool = False) -> JobResult:
        """Plan, publish and run the job; returns when every container returned, or the job failed.

        A restart request (``millstream startpoint set --apply``) stops the containers gracefully,
        publishes a new generation (fanning out the new startpoints) and launches them again.

        With ``handle_signals``, a second Ctrl-C raises ``KeyboardInterrupt`` at once; a JVM this runner started is
        killed first, quietly, so that neither Spark's shutdown nor py4j prints stack traces on the way out.
        """
        signals = graceful_stop_on_signals if handle_signals else _no_signals
        with signals(self._stop):  # from the start: a Ctrl-C while Spark's JVM starts is a stop request too
            try:
                master = (
                    str(self._spark.sparkContext.master) if self._spark else resolve_master(self.config, self.master)
                )
                refuse_host_local_state(self.config, master)
                check_container_memory(self.config)
                if self._spark is None:
                    check_local_slots(master, requirement(self.config))
                    check_dynamic_allocation_sizing(session_settings(self.config, master), self.config)
                spark = self._spark or self._start_session(on_own_thread=handle_signals)
                return self._run_generations(spark)
            except KeyboardInterrupt:
                if self._spark is None:
                    abandon_session()
                raise

    def _start_session(self, *, on_own_thread: bool) -> SparkSession:
        """A SparkContext created on the main thread installs its own SIGINT handler, which calls into the JVM
        through py4j from inside the signal handler (a reentrant call that prints py4j tracebacks) and replaces
        ours; created on another thread, it leaves signals to us, and the main thread stays interruptible."""
        if not on_own_thread:
            return build_session(self.config, self.master, verbose=self.verbose)
        built: dict[str, Any] = {}

        def build() -> None:
            try:
                built["session"] = build_session(self.config, self.master, verbose=self.verbose)
            except BaseException as error:  # handed to the main thread
                built["error"] = error

        thread = threading.Thread(target=build, name="millstream-spark-session", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
        if "error" in built:
            raise built["error"]
        session: SparkSession = built["session"]
        return session

    def _run_generations(self, spark: SparkSession) -> JobResult:
        wait = JobConfig.of(self.config).slots_wait_ms / 1000
        sc = spark.sparkContext
        check_dynamic_allocation_sizing(sc.getConf(), self.config)
        self._resources = container_resources(sc, self.config)
        if self._resources.requests_executors:  # Spark requests the profile's executors for a stage waiting on them
            await_container_executors(sc, self._resources, self.config, wait, stop=self._stop)
        else:
            check_slots(
                sc, requirement(self.config), wait_seconds=wait, profile=self._resources.profile, stop=self._stop
            )
        containers: list[ContainerResult] = []
        with metrics_endpoint(self.config, functools.partial(status_document, self.config)) as server:
            if server is not None:
                self._status_url = status_url(self.config, server.port, spark.sparkContext)
            if MetricsConfig.of(self.config).active:  # containers ship snapshots only while metrics are on
                self._progress = SparkProgress(spark.sparkContext, self.config, self.store)
            while True:
                if self._stop.is_set() and not containers:  # stopped before any container started
                    return JobResult(self.generation, "stopped")
                model = JobCoordinator(self.config, self.store).start()
                self.generation = model.generation
                with driver_heartbeat(self.config, model.generation):
                    result, restart = self._run_generation(spark, model)
                containers.extend(result.containers)
                if not restart or result.outcome == "failed" or self._stop.is_set():
                    result.containers = containers
                    return result
                log.info("restarting the job's containers with a new generation (%s)", restart)

    def _run_generation(self, spark: SparkSession, model: JobModel) -> tuple[JobResult, str | None]:
        sc = spark.sparkContext
        outcome: dict[str, Any] = {}
        group = f"millstream-{JobConfig.of(self.config).job_key}-g{model.generation}"
        self._locations = launch_locations(sc, self.store, len(model.containers))
        placements = PlacementRecorder(sc, self.store, group)
        liveness = LivenessMonitor(sc, self.store, group, self.config)
        launch = threading.Thread(
            target=self._launch, args=(spark, model.to_bytes(), len(model.containers), group, outcome), daemon=True
        )
        launch.start()
        deadline: float | None = None
        restart: str | None = None
        failure: str | None = None
        next_check = 0.0
        while launch.is_alive():
            launch.join(0.2)
            if self._progress is not None:
                self._progress.poll(model.generation)
            now = time.monotonic()
            if deadline is None and now >= next_check:
                next_check = now + 0.5
                placements.poll()
                liveness.poll(model.generation)
                restart = coordination.restart_requested(self.store)
                if restart is not None:
                    coordination.clear_restart(self.store)
                failure = coordination.deterministic_failure(self.store, model.generation)
                if failure is not None:
                    log.info("a container failed the same way again; failing the job: %s", failure.splitlines()[0])
            if (self._stop.is_set() or restart is not None or failure is not None) and deadline is None:
                coordination.request_stop(self.store, model.generation)
                deadline = now + JobConfig.of(self.config).stop_timeout_ms / 1000
            if deadline is not None and now > deadline:
                log.warning("containers did not stop within the stop timeout; cancelling the Spark job")
                sc.cancelJobGroup(group)
                deadline = float("inf")
        if self._progress is not None:  # the containers' last snapshots, written as they stopped
            self._progress.update(model.generation)
        failure = failure or coordination.deterministic_failure(self.store, model.generation)
        if failure is not None:  # the containers that stopped committed; the failed one's retries did not start
            results = [ContainerResult(**orjson.loads(row)) for row in outcome.get("rows", [])]
            return JobResult(model.generation, "failed", results, explain_memory_failure(failure, failure)), None
        if "error" in outcome:
            coordination.request_stop(self.store, model.generation)  # let any surviving container commit
            return JobResult(model.generation, "failed", error=outcome["error"]), None
        results = [ContainerResult(**orjson.loads(row)) for row in outcome["rows"]]
        return generation_result(self.store, model.generation, results), restart

    def request_stop(self) -> None:
        """Ask every container to commit and stop; :meth:`run` then returns ``stopped``."""
        self._stop.set()

    def _launch(self, spark: SparkSession, model: bytes, count: int, group: str, outcome: dict[str, Any]) -> None:
        sc = spark.sparkContext
        generation = JobModel.from_bytes(model).generation
        description = job_description(self.config, generation, count, self._status_url)
        sc.setJobGroup(group, description, interruptOnCancel=True)
        task = functools.partial(
            container_partition,
            self.config.to_dict(),
            self.config.source,
            model,
            _python_paths(self.config),
            os.environ.get("MILLSTREAM_LOG_LEVEL", "INFO"),
        )
        containers = self._resources.apply(
            container_rdd(sc, count, self._locations).setName(f"millstream containers 0-{count - 1}")
        )
        try:
            outcome["rows"] = containers.mapPartitionsWithIndex(task).collect()
        except Exception as error:
            outcome["error"] = describe_failure(error, sc, verbose=self.verbose)


def job_description(config: Config, generation: int, containers: int, status: str | None = None) -> str:
    """What the Spark UI shows for the job: its name, generation and containers (task ``i`` of its one
    stage, partition ``i``, is container ``i``), and where its live progress is: a Spark job's description
    is fixed at submission, so it links millstream's status page (``metrics.prometheus.port``)."""
    plural = "" if containers == 1 else "s"
    link = f"; live progress: {status}" if status else ""
    return (
        f"millstream job {JobConfig.of(config).name} generation {generation}: {containers} container{plural} "
        f"(Spark partition i runs container i){link}"
    )


@contextlib.contextmanager
def _no_signals(_stop: threading.Event) -> Iterator[None]:
    yield


def _python_paths(config: Config) -> list[str]:
    """Directories workers need to import user code: the config's folder, cwd and the driver's source dirs."""
    paths = [os.path.dirname(config.source)] if config.source else []
    paths.append(os.getcwd())
    paths.extend(p for p in sys.path if p and os.path.isdir(p) and "site-packages" not in p and "/lib/python" not in p)
    seen: dict[str, None] = {}
    for path in paths:
        seen.setdefault(os.path.abspath(path), None)
    return list(seen)
