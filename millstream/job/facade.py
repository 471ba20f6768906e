"""``Job``: a job's config, prepared once, and everything done to the job, in one object.

Like Kafka Streams' ``KafkaStreams`` or Quix Streams' ``Application``, it is the user's entry point: build it
from a config file (``Job.from_file``) or a config (``Job(config)``), then ``run`` it on Spark or in this
process, ``plan`` it, read its ``status``, ``stop``, ``drain`` or ``reset`` it, and reach its streams,
startpoints, checkpoints and adjunct-store versions through ``job.streams``, ``job.startpoints``,
``job.checkpoints`` and ``job.adstores``. The ``millstream`` command is built on it, so every command is a
call of this class.

The job's driver services (``coordinator/services.py``: its systems' admins and its metadata-store
connections) are opened for each call and closed when it returns, so a ``Job`` used call by call holds no
connection between calls; inside ``with Job.from_file(path) as job:`` every call shares one set, closed on
leaving the block (each system's admin opened once, as one ``millstream`` command does).

pyspark is imported only when a method needs Spark (``run(runner="spark")``, ``spark_session``), so
``import millstream`` and the in-process runner work without starting, or even installing, Spark.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol

from millstream.config import Config, load_config
from millstream.config.settings import Settings
from millstream.coordinator.drain import DrainRequest, request_drain
from millstream.coordinator.job_result import JobResult
from millstream.coordinator.prepare import prepare
from millstream.coordinator.reset import ResetPlan, reset_job
from millstream.coordinator.services import DriverServices, ServiceScope
from millstream.coordinator.status import JobStatus, job_status
from millstream.coordinator.status_document import status_document
from millstream.errors import ConfigError, MillstreamError
from millstream.extras import missing_module_hint
from millstream.job.state import AdjunctStores, Checkpoints, Startpoints
from millstream.job.stopping import StopRefusedError, StopRequest, request_stop, wait_until_stopped
from millstream.job.streams import Streams
from millstream.job_model import JobModel

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from millstream.operators.planner import ExecutionPlan

__all__ = ["Job", "StopRefusedError", "StopRequest"]

Runner = Literal["spark", "in-process"]


class _Stoppable(Protocol):
    def request_stop(self) -> None: ...


class Job:
    """One job: its prepared config and what can be done to it.

    ``Job(config)`` takes a ``Config`` or a plain mapping of keys to values and prepares it once (paths
    resolved, a high-level application expanded, every key validated): a bad key fails here, with the key
    named, before anything starts. ``job.config`` is that prepared config, as ``Settings``: every part of the job
    it is passed to reads its typed views, parsed once. Used as a context manager, the job keeps one set of
    admins and metadata-store connections for the block (see the module docstring).
    """

    def __init__(self, config: Config | Mapping[str, Any]) -> None:
        self.config: Settings = prepare(config if isinstance(config, Config) else Settings(dict(config)))
        self._scope = ServiceScope(self.config)
        self.streams = Streams(self.config, self._scope)
        """Create, list, describe, write, read, seal and delete streams of the job's systems."""
        self.startpoints = Startpoints(self.config, self._scope)
        """Set, show and clear where the job starts reading."""
        self.checkpoints = Checkpoints(self.config, self._scope)
        """Show the job's checkpoints."""
        self.adstores = AdjunctStores(self.config, self._scope)
        """Build, list and end versions of the job's adjunct data stores."""
        self._running: _Stoppable | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> Job:
        self._scope.hold()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def driver_services(self) -> AbstractContextManager[DriverServices]:
        """The driver services this job's calls use: inside a ``with`` block the job's own (left open), else
        services closed on leaving; for tools built on the façade that read the job beside a run (the CLI's
        progress line)."""
        return self._scope.use()

    def close(self) -> None:
        """Close the admins and metadata-store connections a ``with`` block held; idempotent."""
        self._scope.release()

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], overrides: Mapping[str, Any] | None = None) -> Job:
        """The job a YAML or ``.properties`` config file describes, with ``overrides`` (key -> value) applied."""
        return cls(load_config(path, overrides))

    @property
    def name(self) -> str:
        """``job.name``."""
        return self.config.job.name

    def run(
        self,
        runner: Runner = "spark",
        *,
        master: str | None = None,
        spark: SparkSession | None = None,
        timeout: float | None = None,
        verbose: bool = False,
        handle_signals: bool = False,
    ) -> JobResult:
        """Run the job until its inputs end, it is stopped or drained, or it fails; its ``JobResult``.

        ``runner="spark"`` runs each container as a long-running Spark task, on ``spark`` (an existing session)
        or on a session built for ``master`` (default: ``spark.master``, else ``local[containers + 1]``);
        ``verbose`` keeps Spark's reports of failed attempts. ``runner="in-process"`` runs the containers as
        threads of this process, without Spark, and stops them (they commit) after ``timeout`` seconds. With
        ``handle_signals`` (main thread only), Ctrl-C / SIGTERM stop the job gracefully; a second one raises
        ``KeyboardInterrupt`` at once. ``stop()`` from another thread stops it gracefully too.
        """
        if runner == "in-process":
            if master is not None or spark is not None:
                raise ConfigError("run(runner='in-process') takes no Spark master or session")
            from millstream.testing import InProcessRunner

            local = InProcessRunner(self.config, services=self._scope.held)
            return self._running_with(local, lambda: local.run(timeout, handle_signals=handle_signals))
        if runner == "spark":
            if timeout is not None:
                raise ConfigError("run(timeout=...) applies to runner='in-process' only")
            remote = _spark_runner()(
                self.config, master=master, spark=spark, verbose=verbose, services=self._scope.held
            )
            return self._running_with(remote, lambda: remote.run(handle_signals=handle_signals))
        raise ConfigError(f"run(runner=...) is 'spark' or 'in-process', not {runner!r}")

    def _running_with(self, runner: _Stoppable, run: Callable[[], JobResult]) -> JobResult:
        with self._lock:
            if self._running is not None:
                raise MillstreamError(f"job '{self.name}' is already running from this Job object")
            self._running = runner
        try:
            return run()
        except KeyboardInterrupt:  # a second signal: the containers are told to stop, without waiting for them
            runner.request_stop()
            raise
        finally:
            with self._lock:
                self._running = None

    def stop(self) -> StopRequest | None:
        """Stop the job gracefully, as SIGTERM does: its containers commit and stop, and ``run`` returns the
        outcome ``stopped``.

        A run of this object (in another thread) is told directly; None is returned. Otherwise the stop signal
        is written to the job's metadata store, for a driver anywhere (``millstream run`` elsewhere, a YARN
        application master); the request names the generation and its active containers. Raises
        ``StopRefusedError``, writing nothing, when the job is not running.
        """
        with self._lock:
            running = self._running
        if running is not None:
            running.request_stop()
            return None
        with self._scope.use() as services:
            return request_stop(self.config, services.store())

    def wait_until_stopped(self, generation: int, timeout: float) -> bool:
        """Whether every container of ``generation`` stopped within ``timeout`` seconds."""
        with self._scope.use() as services:
            return wait_until_stopped(services.store(), generation, timeout)

    def drain(self, run_id: str | None = None) -> DrainRequest:
        """Drain the running job: its containers stop reading their inputs, fire their windows, commit and
        stop; ``run`` returns ``drained``. ``run_id``, when given, must be the running run
        (``app.run.id`` or ``generation-N``). Raises ``DrainRefusedError``, writing nothing, otherwise."""
        with self._scope.use() as services:
            return request_drain(self.config, run_id, services)

    def reset(self, *, dry_run: bool = False, force: bool = False) -> ResetPlan:
        """Delete the job's checkpoints, startpoints, control state, store state, changelogs and intermediate
        streams, so its next run starts over from its inputs with empty stores; inputs and outputs stay.
        ``dry_run`` deletes nothing; refused while the job runs, unless ``force`` (containers that died unseen)."""
        with self._scope.use() as services:
            return reset_job(self.config, dry_run=dry_run, force=force, services=services)

    def status(self) -> JobStatus:
        """The published job model, generation, driver and container states, lag per partition, adjunct-store
        positions and startpoints that failed to resolve."""
        with self._scope.use() as services:
            return job_status(self.config, services)

    def status_document(self) -> dict[str, Any]:
        """The status as the metrics endpoint serves it (``/status``): JSON-ready, ``sensitive.*`` masked."""
        with self._scope.use() as services:
            return status_document(self.config, services)

    def model(self) -> JobModel:
        """The job model a run would start with (tasks, partitions, containers), planned without publishing it:
        a missing input stream, task class or system fails here."""
        from millstream.coordinator.job_coordinator import JobCoordinator

        with self._scope.use() as services:
            return JobCoordinator(self.config, services.store(), services).plan().model

    def plan(self) -> ExecutionPlan:
        """The stages of the high-level application (cut at each ``partition_by``), its input, intermediate and
        output streams and their partition counts, as ``millstream plan`` prints them; reads only."""
        from millstream.operators.planner import execution_plan

        if not self.config.get("app.class"):
            raise ConfigError("the config names no application (app.class)")
        with self._scope.use() as services:
            return execution_plan(self.config, services.admin)

    def spark_session(self, master: str | None = None, *, verbose: bool = False) -> SparkSession:
        """The SparkSession for this job (built, or joined if one runs): its ``spark.*`` keys applied and the
        ``millstream`` DataFrame formats registered when pyarrow is installed."""
        _require_pyspark("Job.spark_session")
        from millstream.spark.run.session import build_session

        return build_session(self.config, master, verbose=verbose)

    def __repr__(self) -> str:
        return f"Job({self.name!r})"


def _require_pyspark(purpose: str) -> None:
    hint = missing_module_hint("pyspark", purpose)
    if hint is not None:
        raise MillstreamError(hint)


def _spark_runner() -> Any:
    """The Spark runner's class, imported only now: nothing else of the façade needs pyspark."""
    _require_pyspark("run(runner='spark')")
    from millstream.spark.run.runner import SparkJobRunner

    return SparkJobRunner
