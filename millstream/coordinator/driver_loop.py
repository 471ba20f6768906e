"""The driver's loop, the same for every runner: start a generation's containers, watch them, stop them.

A runner differs only in how it starts containers (threads in this process, or Spark tasks) and in what it
watches beside them (Spark's placements, executor liveness and progress); that is a :class:`Launcher`. What
the driver does around them is one loop, here, so that both runners keep the same contract:

* each generation gets a job model from the coordinator and a driver heartbeat while it runs;
* a restart request (``millstream startpoint set --apply``) stops the containers gracefully and starts the
  next generation; a stop request (Ctrl-C, SIGTERM, ``request_stop``, the run's deadline) stops them and ends
  the run ``stopped``;
* a failure a container records as deterministic (the same error at the same offset,
  ``job.container.failure.repeat.limit``) stops the other containers, which commit, and fails the job with
  its message instead of waiting for retries that would fail the same way;
* containers that do not stop within ``job.coordinator.stop.timeout.ms`` of the stop request are cancelled,
  where the launcher can (Spark cancels its job group; threads cannot be killed and are waited for).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.job_result import JobResult, generation_result
from millstream.coordinator.services import DriverServices
from millstream.job_model import JobModel
from millstream.runtime.container import ContainerResult
from millstream.runtime.heartbeat import driver_heartbeat

log = logging.getLogger(__name__)

TICK_S = 0.1
"""How often the loop looks at its own stop event and the run's deadline."""
CHECK_INTERVAL_S = 0.5
"""How often it reads the metadata store (restart requests, deterministic failures) and lets the launch
watch its containers: often enough that a stop or restart reaches containers within a second."""


@dataclass
class LaunchOutcome:
    """What a generation's containers returned: their results, and the error that failed one of them (or the
    launch itself), if any."""

    results: list[ContainerResult] = field(default_factory=list)
    error: str | None = None


class Launch(Protocol):
    """One generation's containers, started."""

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for every container to return; true while any still runs."""
        ...

    def watch(self) -> None:
        """Look after the running containers (called every ``CHECK_INTERVAL_S``)."""
        ...

    def cancel(self) -> None:
        """The last resort once the stop timeout passed: end the containers without their final commit."""
        ...

    def outcome(self) -> LaunchOutcome:
        """Once every container returned: what they returned."""
        ...


class Launcher(Protocol):
    """How a runner starts a generation's containers."""

    def launch(self, model: JobModel) -> Launch: ...

    def explain(self, failure: str) -> str:
        """A deterministic failure's message as the job's error (Spark adds what memory settings to change)."""
        ...


class DriverLoop:
    """Runs generations until the job ends, fails, or is stopped (see the module docstring).

    Every generation plans with the same ``services`` (the driver's admins, one per system for the whole run);
    a loop given none builds its own around ``store`` and closes them when :meth:`run` returns."""

    def __init__(
        self,
        config: Settings,
        store: MetadataStore,
        launcher: Launcher,
        stop: threading.Event | None = None,
        services: DriverServices | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.launcher = launcher
        self.stop = stop or threading.Event()
        self.services = services
        self.generation = 0

    def run(self, deadline: float | None = None) -> JobResult:
        """Run to the end; past ``deadline`` (``time.monotonic()``) the containers are stopped, and commit."""
        if self.services is not None:
            return self._run(self.services, deadline)
        with DriverServices(self.config, store=self.store) as services:
            return self._run(services, deadline)

    def _run(self, services: DriverServices, deadline: float | None) -> JobResult:
        containers: list[ContainerResult] = []
        while True:
            if self.stop.is_set() and not containers:  # stopped before any container started
                return JobResult(self.generation, "stopped")
            model = JobCoordinator(self.config, self.store, services).start()
            self.generation = model.generation
            with driver_heartbeat(self.config, model.generation, services.new_store):
                result, restart = self._run_generation(model, deadline)
            containers.extend(result.containers)
            if restart is None or result.outcome == "failed" or self.stop.is_set():
                result.containers = containers
                return result
            log.info("restarting the job's containers with a new generation (%s)", restart)

    def _run_generation(self, model: JobModel, deadline: float | None) -> tuple[JobResult, str | None]:
        launch = self.launcher.launch(model)
        watch = _GenerationWatch(self.store, model.generation, self.config.job.stop_timeout_ms / 1000)
        next_check = 0.0
        while launch.wait(TICK_S):
            now = time.monotonic()
            if deadline is not None and now > deadline:
                self.stop.set()
            if now >= next_check:
                next_check = now + CHECK_INTERVAL_S
                launch.watch()
                watch.check()
            if watch.stop_due(now, stopping=self.stop.is_set()):
                launch.cancel()
        outcome = launch.outcome()
        failure = watch.failure or coordination.deterministic_failure(self.store, model.generation)
        if failure is not None:  # the containers that stopped committed; the failed one's retries did not start
            return JobResult(model.generation, "failed", outcome.results, self.launcher.explain(failure)), None
        if outcome.error is not None:
            coordination.request_stop(self.store, model.generation)  # let any surviving container commit
            return JobResult(model.generation, "failed", outcome.results, outcome.error), None
        return generation_result(self.store, model.generation, outcome.results), watch.restart


class _GenerationWatch:
    """The driver's view of one generation: a restart asked for, a deterministic failure recorded, and when the
    stop it then requests has lasted past the stop timeout."""

    def __init__(self, store: MetadataStore, generation: int, stop_timeout_s: float) -> None:
        self.store = store
        self.generation = generation
        self.stop_timeout_s = stop_timeout_s
        self.restart: str | None = None
        self.failure: str | None = None
        self._stop_deadline: float | None = None

    def check(self) -> None:
        if self._stop_deadline is not None:
            return
        if self.restart is None and (restart := coordination.restart_requested(self.store)) is not None:
            coordination.clear_restart(self.store)
            self.restart = restart
        self.failure = coordination.deterministic_failure(self.store, self.generation)
        if self.failure is not None:
            log.info("a container failed the same way again; failing the job: %s", self.failure.splitlines()[0])

    def stop_due(self, now: float, *, stopping: bool) -> bool:
        """Request the stop once one is wanted; true once, when it has lasted past the stop timeout."""
        if self._stop_deadline is None:
            if stopping or self.restart is not None or self.failure is not None:
                coordination.request_stop(self.store, self.generation)
                self._stop_deadline = now + self.stop_timeout_s
            return False
        if now > self._stop_deadline:
            log.warning("containers did not stop within the stop timeout (job.coordinator.stop.timeout.ms)")
            self._stop_deadline = float("inf")
            return True
        return False
