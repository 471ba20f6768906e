"""Run a job on Spark: the driver is the job coordinator, each container one long-running Spark task.

Stopping is ours, not Spark's: cancelling a Spark job SIGKILLs the Python workers, so a graceful
stop (Ctrl-C, SIGTERM, :meth:`SparkJobRunner.request_stop`) writes a stop signal to the metadata
store; containers see it within a second, commit and return. Cancellation remains the last resort
after ``job.coordinator.stop.timeout.ms``.

A failure of user code that repeats at the same offset is deterministic (``job.container.failure.repeat.limit``):
the failing container records it, and the driver stops the other containers and fails the job with its message
instead of waiting for Spark to exhaust its retries.

The driver's loop (generations, restarts, stops, deterministic failures) is the in-process runner's too
(``coordinator/driver_loop.py``); this module adds what only Spark needs before it: the session, its slots and
executors, and the containers launched as Spark tasks (``spark/launcher.py``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Iterator
from typing import Any

from pyspark.sql import SparkSession

from millstream.composition.metadata import metadata_store
from millstream.config import Config
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.coordinator.driver_loop import DriverLoop
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.coordinator.services import DriverServices
from millstream.coordinator.signals import graceful_stop_on_signals
from millstream.coordinator.status_document import status_document
from millstream.metrics.server import metrics_endpoint
from millstream.spark.run.launcher import SparkLauncher
from millstream.spark.run.multi_host import refuse_host_local_state
from millstream.spark.run.progress import SparkProgress, status_url
from millstream.spark.run.resources import (
    ContainerResources,
    await_container_executors,
    check_container_memory,
    check_dynamic_allocation_sizing,
    container_resources,
)
from millstream.spark.run.session import (
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
        self,
        config: Config,
        *,
        master: str | None = None,
        spark: SparkSession | None = None,
        verbose: bool = False,
        services: DriverServices | None = None,
    ) -> None:
        """``services``: the driver's services of a root that holds them (a ``Job`` in a ``with`` block, a CLI
        command), shared with its other steps; without them, the run has services of its own, closed when it
        ends, around the metadata-store connection this runner opens (``store``, left open for its caller)."""
        self.config = prepare(config)
        self.master = master
        self.verbose = verbose
        self._spark = spark
        self._stop = threading.Event()
        self._services = services
        self.store = services.store() if services is not None else metadata_store(self.config)
        self._driver: DriverLoop | None = None
        self._resources = ContainerResources(None, 1)

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
        wait = self.config.job.slots_wait_ms / 1000
        sc = spark.sparkContext
        check_dynamic_allocation_sizing(sc.getConf(), self.config)
        self._resources = container_resources(sc, self.config)
        if self._resources.requests_executors:  # Spark requests the profile's executors for a stage waiting on them
            await_container_executors(sc, self._resources, self.config, wait, stop=self._stop)
        else:
            check_slots(
                sc, requirement(self.config), wait_seconds=wait, profile=self._resources.profile, stop=self._stop
            )
        services = self._services or DriverServices(self.config, store=self.store)
        owned = services if self._services is None else None
        with (
            owned or contextlib.nullcontext(),
            metrics_endpoint(
                self.config, functools.partial(status_document, self.config, services), services.store
            ) as server,
        ):
            launcher = SparkLauncher(spark, self.config, self.store, self._resources, verbose=self.verbose)
            if server is not None:
                launcher.status_url = status_url(self.config, server.port, spark.sparkContext)
            if self.config.view(MetricsConfig).active:  # containers ship snapshots only while metrics are on
                launcher.progress = SparkProgress(spark.sparkContext, self.config, self.store)
            self._driver = DriverLoop(self.config, self.store, launcher, self._stop, services)
            return self._driver.run()

    @property
    def generation(self) -> int:
        """The generation the job runs (or last ran), once it started; 0 before."""
        return self._driver.generation if self._driver is not None else 0

    def request_stop(self) -> None:
        """Ask every container to commit and stop; :meth:`run` then returns ``stopped``."""
        self._stop.set()


@contextlib.contextmanager
def _no_signals(_stop: threading.Event) -> Iterator[None]:
    yield
