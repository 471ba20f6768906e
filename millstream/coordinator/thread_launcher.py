"""Containers as threads of the driver's process: the in-process runner's :class:`Launcher`.

The same containers, coordinator, checkpoints and systems as on Spark, one thread each. A container that
raises fails its generation: the others are asked to stop at once (they commit), and the job's error names
the container and the exception. Threads cannot be killed, so a container that outlives the stop timeout is
waited for.
"""

from __future__ import annotations

import logging
import threading

from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.coordinator.driver_loop import Launch, LaunchOutcome
from millstream.job_model import JobModel
from millstream.log_context import container_log_context
from millstream.runtime.container import Container, ContainerResult

log = logging.getLogger(__name__)


class ThreadLauncher:
    """Starts each container of a generation in a thread of its own."""

    def __init__(self, config: Settings, store: MetadataStore, stop: threading.Event) -> None:
        self.config = config
        self.store = store
        self.stop = stop

    def launch(self, model: JobModel) -> Launch:
        return _ThreadLaunch(self, model)

    def explain(self, failure: str) -> str:
        return failure


class _ThreadLaunch:
    def __init__(self, launcher: ThreadLauncher, model: JobModel) -> None:
        self.launcher = launcher
        self.model = model
        self.results: dict[str, ContainerResult] = {}
        self.errors: dict[str, BaseException] = {}
        self.threads = [
            threading.Thread(target=self._container, args=(cid,), name=f"container-{cid}", daemon=True)
            for cid in model.containers
        ]
        for thread in self.threads:
            thread.start()

    def _container(self, container_id: str) -> None:
        launcher = self.launcher
        try:
            with container_log_context(launcher.config.job.name, container_id):
                container = Container(launcher.config, self.model, container_id, stop_event=launcher.stop)
                self.results[container_id] = container.run()
        except BaseException as error:  # reported as the job's failure by outcome()
            self.errors[container_id] = error
            coordination.request_stop(launcher.store, self.model.generation)

    def wait(self, seconds: float) -> bool:
        running = [thread for thread in self.threads if thread.is_alive()]
        if running:
            running[0].join(seconds)
        return any(thread.is_alive() for thread in self.threads)

    def watch(self) -> None:
        """Nothing beside the containers to look after: their threads report through ``outcome``."""

    def cancel(self) -> None:
        log.warning("threads cannot be cancelled: waiting for the containers to finish their stop")

    def outcome(self) -> LaunchOutcome:
        ordered = [self.results[cid] for cid in sorted(self.results, key=int)]
        if not self.errors:
            return LaunchOutcome(ordered)
        cid, error = sorted(self.errors.items())[0]
        return LaunchOutcome(ordered, f"container {cid}: {type(error).__name__}: {error}")
