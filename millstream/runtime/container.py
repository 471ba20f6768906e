"""A container: hosts the tasks the JobModel gives it, from startup to a committed stop.

Startup fences off every earlier attempt of this container (a new epoch in the metadata store), so a
zombie attempt left behind by a retried Spark task can never overwrite this attempt's checkpoints. The
same attempt token fences its other writes: producers write on its behalf (the embedded log refuses an
older attempt's appends once a newer one claimed the partition), and the stores work in the attempt's own
directories (see ``storage.ownership``).
An attempt that user code failed records the failure; when the same failure ends
``job.container.failure.repeat.limit`` attempts it is deterministic: the job fails with it, and the retries
Spark still makes return at once instead of failing at the same offset again.
The container runs without Spark: the Spark runner runs a :class:`Container` inside a Spark task,
the in-process runner calls it from a thread.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NoReturn, TypeVar

import orjson

from millstream.adjunct.loop import AdjunctLoop
from millstream.adjunct.manager import AdjunctContext, AdjunctDataStoreManager, adjunct_data_store_manager
from millstream.api.task import StreamTask
from millstream.checkpoint.base import CheckpointManager, WriterFence
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointV1, CheckpointV2
from millstream.checkpoint.factory import checkpoint_factory
from millstream.checkpoint.factory import checkpoint_manager as make_checkpoint_manager
from millstream.checkpoint.group_commit import CheckpointGroupCommit
from millstream.checkpoint.offset_manager import OffsetManager, TrimmedOffsetError, keep_earliest
from millstream.checkpoint.purge import CommittedMessagePurger
from millstream.config.secrets import mask_secrets, masked_error, masked_traceback
from millstream.config.settings import Settings
from millstream.config.views import StreamSamzaConfig, adjunct_store_names, store_names
from millstream.contracts import coordination
from millstream.contracts.metadata import FencedError, MetadataStore
from millstream.contracts.metrics import NOOP_METRICS
from millstream.contracts.systems import DescribingSystemConsumer, SystemAdmin, SystemConsumer, WriterToken
from millstream.errors import ConfigError, MillstreamError, StreamNotFoundError
from millstream.job_model import JobModel
from millstream.model import SystemStream, SystemStreamPartition, TaskName
from millstream.plugins import load_object
from millstream.runtime import file_limit
from millstream.runtime.async_tasks import close_container_loop, run_hook
from millstream.runtime.collector import TaskCollector
from millstream.runtime.drain import DrainMonitor
from millstream.runtime.heap import start_up_heap_frozen
from millstream.runtime.heartbeat import ContainerHeartbeat, DriverWatch, driver_watch
from millstream.runtime.metering import ContainerMetering
from millstream.runtime.process_errors import ProcessErrorPolicy, TaskCallbackError, TaskProcessError
from millstream.runtime.restart import RestartSettings, RestartStrategy, read_restarts, write_restarts
from millstream.runtime.run_loop import DeadLetterPolicy, Decoder, RunLoop, RunLoopSettings
from millstream.runtime.services import ContainerServices
from millstream.runtime.task_committer import CommitSettings
from millstream.runtime.task_instance import AppliedStartpoints, ContainerContext, TaskInstance
from millstream.runtime.transaction import ContainerTransaction
from millstream.serde.registry import SerdeRegistry
from millstream.startpoint.manager import STARTPOINT_STATUS_NAMESPACE, StartpointManager
from millstream.startpoint.settings import StartpointConfig
from millstream.storage.managers.stores import ContainerStorageManager, TaskStorageManager
from millstream.storage.open_files import store_files
from millstream.systems.consumers import SystemConsumers
from millstream.systems.producers import ProducerPool
from millstream.table.provider import TableProvider

log = logging.getLogger(__name__)

_Resource = TypeVar("_Resource", bound=AbstractContextManager[Any])


@dataclass
class ContainerResult:
    """What a container reports back to the driver: never data, only a summary."""

    container_id: str
    generation: int
    epoch: int
    outcome: str
    """``finished`` (inputs ended or shutdown requested), ``stopped`` (stop signal), ``drained`` (a drain
    request, or the drain of an upstream stage, stopped every task) or ``superseded`` (another run of the job
    published a newer generation: it stopped without a final commit, which would be refused) or ``failed``
    (a retry that did not start: an earlier attempt's failure was deterministic and fails the job)."""
    processed: dict[str, int]
    commits: int
    dropped_deserialization_errors: int
    seconds: float
    processing_seconds: float
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)
    executor: dict[str, Any] = field(default_factory=dict)
    adjunct_stored: int = 0
    """Messages the container's adjunct data stores stored (never given to ``process``)."""
    bootstrap_seconds: float = 0.0
    skipped_process_errors: int = 0
    """Messages ``task.process.errors`` skipped (``skip``) or set aside (``dead-letter``), and window calls it
    skipped."""
    waiting_for: dict[str, list[str]] = field(default_factory=dict)
    """Per task that had not finished when the container returned, the partitions it still waited for
    end-of-stream of (``system.stream partition N``): empty when every task ended by itself."""

    @property
    def messages(self) -> int:
        return sum(self.processed.values())


def load_task_class(config: Settings) -> type:
    """Import ``task.class``; a module beside the config file is importable without packaging."""
    name = config.task.class_name
    if config.source:
        config_dir = os.path.dirname(config.source)
        if config_dir not in sys.path:
            sys.path.insert(0, config_dir)
    if not name:
        raise ConfigError("config key 'task.class' is required: the StreamTask class to run (module:Class)")
    task_class = load_object(name, "task.class")
    if not (isinstance(task_class, type) and issubclass(task_class, StreamTask)):
        raise ConfigError(f"config key 'task.class': '{name}' is not a millstream.api.task.StreamTask subclass")
    return task_class


@dataclass
class TaskPlan:
    """Where one task starts, worked out before anything is restored or read."""

    ssps: set[SystemStreamPartition]
    """The task's partitions that reach ``process`` (adjunct partitions feed stores instead)."""
    last_checkpoint: Checkpoint | None
    starts: dict[SystemStreamPartition, str]
    repositioned: set[SystemStreamPartition]
    storage: TaskStorageManager | None
    startpoints: AppliedStartpoints | None


@dataclass(frozen=True)
class Attempt:
    """What fencing established (``_fence``): this attempt of the container, and its place to report."""

    store: MetadataStore
    """The container thread's metadata-store connection (the heartbeat thread beats through it too)."""
    epoch: int
    fence: WriterFence
    run_id: str
    metering: ContainerMetering


@dataclass(frozen=True)
class Prepared:
    """What ``_prepare`` built for the later phases: the container's checkpoints, stores and policies."""

    admins: dict[str, SystemAdmin]
    """The input systems' admins (the services' shared ones)."""
    checkpoints: CheckpointManager
    transaction: ContainerTransaction | None
    storage: ContainerStorageManager
    adjunct: AdjunctDataStoreManager | None
    metadata: dict[Any, Any]
    """The input partitions' metadata, read once."""
    described: dict[str, SystemConsumer]
    """Per system whose consumers describe partitions (``DescribingSystemConsumer``), the consumer that read its
    tasks' partitions' metadata and keeps their files open for ``_start_tasks`` to register them on it."""
    process_errors: ProcessErrorPolicy
    task_class: type
    checkpoint_writer: CheckpointGroupCommit
    """What the tasks' commits write their checkpoints through: one batch for the tasks committing together."""


@dataclass(frozen=True)
class Planned:
    """Each task's start (``_plan_tasks``), and where each partition is registered with its consumer: from the
    earliest start of the tasks that read it."""

    tasks: dict[TaskName, TaskPlan]
    registered: dict[SystemStreamPartition, str]


@dataclass(frozen=True)
class Bootstrapped:
    """The adjunct stores are current (``_bootstrap_adjunct_stores``); the stop check the run loop polls."""

    adjunct_loop: AdjunctLoop | None
    stop_probe: Callable[[], bool]


@dataclass(frozen=True)
class Started:
    """The initialised tasks and the started consumers (``_start_tasks``)."""

    tasks: list[TaskInstance]
    consumers: SystemConsumers
    tables: TableProvider


@dataclass(frozen=True)
class Running:
    """The run loop and what it counts (``_run``), kept from before it runs: a container that a newer generation
    supersedes while it runs reports them too."""

    loop: RunLoop
    tasks: list[TaskInstance]
    dead_letters: DeadLetterPolicy
    process_errors: ProcessErrorPolicy
    adjunct_loop: AdjunctLoop | None


class Container:
    """The composition root of a container: it builds every collaborator of its tasks and owns them.

    ``run`` goes through Samza's phases in order — fence (a new attempt), prepare (checkpoints, stores),
    plan (each task's start: checkpoint ▸ startpoint ▸ default), restore (stores), bootstrap (adjunct stores),
    start (tasks, consumers), run (the run loop) and shut down (final commits). Each phase returns a frozen
    record the next ones take (:class:`Attempt`, :class:`Prepared`, ...), so the phase order is checked by
    the types, not by attributes that appear mid-life. What the container opens outside the process (admins,
    metadata-store connections, producers, serdes, the metrics registry) its :class:`ContainerServices`
    opens once and hands down. Every resource is held in one ``ExitStack`` as it is opened, so it is released
    in the reverse order, whatever phase failed, and a failure while releasing one never hides the error
    that ended the container.
    """

    def __init__(
        self,
        config: Settings,
        job_model: JobModel,
        container_id: str,
        *,
        stop_event: threading.Event | None = None,
        executor: dict[str, Any] | None = None,
        store: MetadataStore | None = None,
    ) -> None:
        self.config = config
        self.job_model = job_model
        self.container_id = container_id
        self.generation = job_model.generation
        self.model = job_model.containers[container_id]
        self.ssps = {ssp for task in self.model.tasks.values() for ssp in task.ssps}
        self.task_config = config.task
        self._stop_event = stop_event
        self._executor = executor or {}
        self._given_store = store
        self._status: dict[str, Any] = {}
        self._started = time.monotonic()
        self._resources = ExitStack()
        self._running: Running | None = None
        """The run loop once running: what a container handing over to a newer generation reports."""

    def run(self) -> ContainerResult:
        with self._resources:
            self._resources.callback(_quietly, close_container_loop)  # last: the tables' close still runs on it
            services = self._hold(ContainerServices(self.config, self.container_id, store=self._given_store))
            try:
                attempt = self._fence(services)
            except _NotStartingError as not_starting:
                return self._not_starting(not_starting)
            try:
                prepared = self._prepare(attempt, services)
                planned = self._plan_tasks(attempt, prepared)
                self._restore(attempt, prepared, planned)
                driver = driver_watch(self.config, attempt.store, self.generation)
                probe = _stop_probe(attempt.store, self.generation, self._stop_event, driver, self.container_id)
                bootstrapped = self._bootstrap_adjunct_stores(attempt, services, prepared, probe)
                started = self._start_tasks(attempt, services, prepared, planned)
                running = self._run(attempt, services, prepared, planned, started, bootstrapped)
                return self._shut_down(attempt, services, running)
            except (SupersededError, FencedError) as error:
                newer = coordination.current_generation(attempt.store) > self.generation
                if self._running is None or not newer:
                    self._report(attempt, "superseded" if newer else "failed", error=str(error))  # refused once fenced
                    raise  # fenced by a newer attempt of this container, or before running: Spark retries it
                return self._hand_over(attempt, self._running, error)
            except BaseException as error:
                self._fail(attempt, error)
        raise AssertionError("unreachable: the with block returns or raises")  # pragma: no cover

    def _not_starting(self, not_starting: _NotStartingError) -> ContainerResult:
        """A retry that Spark started after a newer run took over, or of a generation that failed for good."""
        if not_starting.outcome == "superseded":
            log.warning("container %s: %s; not starting", self.container_id, not_starting.error)
        else:
            log.error("container %s: not starting: %s", self.container_id, not_starting.error)
        seconds = time.monotonic() - self._started
        return ContainerResult(
            self.container_id, self.generation, not_starting.epoch, not_starting.outcome, {}, 0, 0, seconds, 0.0
        )

    def _fail(self, attempt: Attempt, error: BaseException) -> NoReturn:
        """Record and report what ended the attempt, then raise it (masked when it shows a secret)."""
        self._record_failure(attempt, error)
        reported = masked_error(error, self.config)
        self._report(attempt, "failed", error=str(reported))
        if reported is error:
            # the runner reports the error once (and its status keeps it): the container's own log names
            # the attempt it ended and the error's type, so a worker's log tells attempts apart
            log.error(
                "container %s (generation %s, attempt %s) failed: %s (its status records the error)",
                self.container_id, self.generation, attempt.epoch, type(error).__name__,
            )  # fmt: skip
            raise error
        log.error("container %s failed:\n%s", self.container_id, masked_traceback(error, self.config))
        raise reported from None

    # -- phases ---------------------------------------------------------------------------------------

    def _fence(self, services: ContainerServices) -> Attempt:
        """A new attempt fences off every earlier one, and a container of an older generation never starts."""
        store = services.metadata_store()
        generation = self.generation
        if coordination.deterministic_failure(store, generation) is not None:
            raise _NotStartingError(
                "failed",
                coordination.container_epoch(store, self.container_id),  # not a new attempt
                DeterministicFailureError(
                    f"generation {generation} failed deterministically (job.container.failure.repeat.limit)"
                ),
            )
        if (current := coordination.current_generation(store)) > generation:
            # before taking an attempt: a late retry of an old generation must not fence the newer one's container
            message = coordination.superseded_message(store, generation, current)
            epoch = coordination.container_epoch(store, self.container_id)
            raise _NotStartingError("superseded", epoch, SupersededError(message))
        epoch = coordination.start_container_attempt(store, self.container_id)
        current = coordination.current_generation(store)
        if current > generation:
            raise _NotStartingError(
                "superseded", epoch, SupersededError(coordination.superseded_message(store, generation, current))
            )
        if current != generation:
            raise FencedError(
                f"container {self.container_id} belongs to generation {generation}, but the job is at "
                f"generation {current}"
            )
        services.start_attempt(WriterToken(self.config.job.job_key, self.container_id, generation, epoch))
        metering = ContainerMetering(services, self.container_id, generation, epoch)
        self._resources.callback(_quietly, lambda: metering.close("failed"))  # no-op once closed
        run_id = coordination.job_run_id(self.config, generation)
        attempt = Attempt(store, epoch, WriterFence(generation, self.container_id, epoch), run_id, metering)
        self._status = {"pid": os.getpid(), "host": socket.gethostname(), "attempt": epoch, "run-id": run_id}
        self._status.update(generation=generation, **self._executor)
        interval_s = self.config.job.container_heartbeat_interval_ms / 1000
        heartbeat = ContainerHeartbeat(store, self.container_id, generation, epoch, interval_s)
        self._resources.callback(heartbeat.start().stop)  # beats through the backoff and the restore too
        self._back_off(attempt)
        self._report(attempt, "starting")
        log.info("container %s (generation %s, attempt %s) starting", self.container_id, generation, epoch)
        return attempt

    def _back_off(self, attempt: Attempt) -> None:
        """Apply the restart strategy (``job.container.restart.*``): a new attempt after a failure waits its delay
        (in state ``backoff``, visible in ``job status`` and the metrics) or, past the failure-rate limit,
        fails the job at once naming the limit and the last failure."""
        store, epoch = attempt.store, attempt.epoch
        strategy = RestartStrategy(RestartSettings.of(self.config), lambda: int(time.time() * 1000))
        last = coordination.container_statuses(store).get(self.container_id, {})
        decision = strategy.on_attempt(self.container_id, self.generation, read_restarts(store, self.container_id))
        write_restarts(store, self.container_id, epoch, decision.record)
        if decision.exceeded is not None:
            cause = f"; its last failure: {str(last['error']).splitlines()[0]}" if last.get("error") else ""
            message = decision.exceeded + cause
            coordination.record_deterministic_failure(store, self.container_id, self.generation, epoch, message)
            raise _NotStartingError("failed", epoch, DeterministicFailureError(message))
        self._status.update({"restarts": decision.record.restarts, "backoff-ms": decision.delay_ms})
        if decision.record.restarts:
            self._status["restart-cause"] = _restart_cause(last, self.generation)
        attempt.metering.restarted(decision.record.restarts, decision.delay_ms / 1000, store)
        if decision.delay_ms:
            log.warning(
                "container %s: restart %d of generation %s waits %.1fs (job.container.restart.backoff.*)",
                self.container_id, decision.record.restarts, self.generation, decision.delay_ms / 1000,
            )  # fmt: skip
            self._report(attempt, "backoff", **{"backoff-until": decision.record.running_from_ms})
            self._wait(store, decision.delay_ms / 1000)

    def _wait(self, store: MetadataStore, seconds: float) -> None:
        """Sleep through a restart delay, cut short by a stop request: a stopping job does not wait for it."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            if coordination.stop_requested(store, self.generation) or (
                self._stop_event is not None and self._stop_event.is_set()
            ):
                return
            time.sleep(min(remaining, 0.25))

    def _record_failure(self, attempt: Attempt, error: BaseException) -> None:
        """Count a failure of user code; at ``job.container.failure.repeat.limit`` identical ones it is
        deterministic (a retry resumes from the same checkpoint and fails again) and the job fails with it.
        A resume point already deleted (``TrimmedOffsetError``) is deterministic at once: deleted records never
        come back, so every retry would fail the same way.
        Recording never replaces the error that ended the attempt: a store that refuses is only logged."""
        trimmed = isinstance(error, TrimmedOffsetError)
        if not (trimmed or isinstance(error, TaskProcessError | TaskCallbackError)):
            return
        limit = self.config.job.container_failure_repeat_limit
        store, epoch = attempt.store, attempt.epoch
        try:
            count = 1
            if isinstance(error, TaskProcessError | TaskCallbackError):
                count = coordination.record_container_failure(
                    store, self.container_id, self.generation, epoch, error.failure()
                )
            if not limit or (count < limit and not trimmed):
                return
            message = mask_secrets(f"{type(error).__module__}.{type(error).__qualname__}: {error}", self.config)
            if coordination.record_deterministic_failure(store, self.container_id, self.generation, epoch, message):
                why = "records it must read were deleted" if trimmed else f"the same failure ended {count} attempts"
                log.error(
                    "container %s: %s; it is deterministic, the job fails (job.container.failure.repeat.limit=%d)",
                    self.container_id, why, limit,
                )  # fmt: skip
        except (MillstreamError, OSError) as record_error:
            log.warning("container %s: could not record its failure: %s", self.container_id, record_error)

    def _prepare(self, attempt: Attempt, services: ContainerServices) -> Prepared:
        config = self.config
        admins = services.admins.of(ssp.system for ssp in self.ssps)
        task_config = self.task_config
        producers = services.producers
        process_errors = ProcessErrorPolicy(task_config.process_errors, task_config.dead_letter(), producers)
        checkpoints = make_checkpoint_manager(config, attempt.store, attempt.fence)
        checkpoints.start()
        self._hold(checkpoints)
        transaction = self._exactly_once(checkpoints, producers)
        metrics = services.registry or NOOP_METRICS
        storage = ContainerStorageManager(
            config, self.job_model, self.container_id, attempt.store, services, services.serdes, metrics
        )
        self._hold(storage)
        _reserve_store_files(config, services, storage.tasks_in_container)
        adjunct: AdjunctDataStoreManager | None = None
        if adjunct_store_names(config):
            # The adjunct loop's own connection: it runs on its own thread.
            adjunct_store = services.metadata_store("adjunct")
            context = AdjunctContext(config, self.job_model, self.container_id, adjunct_store, services.serdes, admins)
            adjunct = adjunct_data_store_manager(context)
            if adjunct is not None:
                self._resources.callback(_quietly, adjunct.close)
        task_ssps = self.ssps - (adjunct.ssps if adjunct is not None else frozenset())
        described = _describing_consumers(services, {ssp.system for ssp in task_ssps})
        self._resources.callback(_stop_consumers, described)  # those no registration took
        metadata = _partition_metadata(admins, self.ssps, described, task_ssps)
        task_class = load_task_class(config)
        return Prepared(
            admins,
            checkpoints,
            transaction,
            storage,
            adjunct,
            metadata,
            described,
            process_errors,
            task_class,
            CheckpointGroupCommit(checkpoints),
        )

    def _plan_tasks(self, attempt: Attempt, prepared: Prepared) -> Planned:
        """Each task's starting offsets, in task order; partitions several tasks read are registered once,
        from the earliest of their starts (``registered``)."""
        adjunct_ssps = prepared.adjunct.ssps if prepared.adjunct is not None else frozenset()
        admins, checkpoints, store = prepared.admins, prepared.checkpoints, attempt.store
        offsets = OffsetManager(self.config, admins)
        startpoints = _startpoint_manager(self.config, store)
        fan_outs = startpoints.fan_outs_for_tasks(self.model.tasks) if startpoints is not None else {}
        failures_shown = set(store.all(STARTPOINT_STATUS_NAMESPACE)) if startpoints is not None else set()
        registered: dict[SystemStreamPartition, str] = {}
        plans: dict[TaskName, TaskPlan] = {}
        for task_name, task_model in sorted(self.model.tasks.items(), key=lambda kv: kv[0].sort_key()):
            ssps = set(task_model.ssps - adjunct_ssps)
            checkpoints.register(task_name)
            last = checkpoints.read_last_checkpoint(task_name)
            task_store = prepared.storage.task_storage(task_name, task_model)
            if task_store is not None:
                self._hold(task_store)
                if isinstance(last, CheckpointV1) and not task_store.restorable_from_v1:
                    last = _last_v2_checkpoint(self.config, store, task_name)
            starts = offsets.starting_offsets(task_name, ssps, last, prepared.metadata)
            repositioned = {ssp for ssp in ssps if self.config.view(StreamSamzaConfig, ssp.system_stream).reset_offset}
            applied: AppliedStartpoints | None = None
            if startpoints is not None:
                fan_out = fan_outs[str(task_name)]
                resolution = offsets.apply_startpoints(task_name, starts, fan_out)
                starts = resolution.offsets
                repositioned.update(resolution.applied)
                record_startpoint_failures(store, task_name, resolution.failures, str(task_name) in failures_shown)
                if in_use := {ssp for ssp in fan_out if ssp in ssps}:
                    applied = AppliedStartpoints(startpoints, task_name, in_use)
            keep_earliest(registered, starts, admins)
            plans[task_name] = TaskPlan(ssps, last, starts, repositioned, task_store, applied)
        return Planned(plans, registered)

    def _restore(self, attempt: Attempt, prepared: Prepared, planned: Planned) -> None:
        stateful = {name: (plan.storage, plan.last_checkpoint) for name, plan in planned.tasks.items() if plan.storage}
        if stateful:
            self._report(attempt, "restoring")
            with attempt.metering.restoring():
                prepared.storage.restore(stateful)
        # Registered after the task stores, so it runs before they close: an upload in flight ends first.
        self._resources.callback(_quietly, prepared.storage.drain_commits)

    def _bootstrap_adjunct_stores(
        self, attempt: Attempt, services: ContainerServices, prepared: Prepared, stop_probe: Callable[[], bool]
    ) -> Bootstrapped:
        """Adjunct stores are current before any task is initialised; then the adjunct loop keeps them
        current on its own thread, and the stop check raises what failed it on the container's thread."""
        adjunct = prepared.adjunct
        if adjunct is None:
            return Bootstrapped(None, stop_probe)
        self._report(attempt, "bootstrapping")
        starts = adjunct.start(prepared.metadata)
        consumers = SystemConsumers(_register_consumers(services, starts))
        consumers.start()
        self._resources.callback(_quietly, consumers.stop)
        loop = AdjunctLoop(
            adjunct,
            consumers,
            starts,
            prepared.metadata,
            prepared.admins,
            commit_ms=self.task_config.commit_ms,
            poll_interval_ms=self.task_config.poll_interval_ms,
        )
        attempt.metering.watch(loop)
        loop.bootstrap(stop_probe)
        loop.start()
        self._resources.callback(_quietly, loop.stop)
        return Bootstrapped(loop, _adjunct_checked(stop_probe, loop))

    def _exactly_once(self, checkpoints: CheckpointManager, producers: ProducerPool) -> ContainerTransaction | None:
        """Under exactly-once, the transaction the container's commits end: checkpoints join it through the
        producer of the checkpoint topic's system, which every write of the container goes through."""
        if not self.task_config.exactly_once:
            return None
        system = checkpoint_factory(self.config).transaction_system(self.config)
        if system is None:
            raise ConfigError(
                "task.processing.guarantee=exactly-once needs checkpoints written in the output's transaction: set "
                f"task.checkpoint.factory=kafka ('{self.task_config.checkpoint_factory}' cannot)"
            )
        checkpoints.join_transaction(producers.state_producer(system))
        return ContainerTransaction(producers)

    def _start_tasks(
        self, attempt: Attempt, services: ContainerServices, prepared: Prepared, planned: Planned
    ) -> Started:
        commit_settings = CommitSettings.of(self.config, prepared.storage.pause)
        tables = TableProvider(self.config, services.registry or NOOP_METRICS)
        self._resources.callback(_quietly, partial(_close_tables, tables))
        tasks = [
            self._task_instance(attempt, services, prepared, name, plan, planned.registered, tables, commit_settings)
            for name, plan in planned.tasks.items()
        ]
        consumers = SystemConsumers(_register_consumers(services, planned.registered, prepared.described))
        for index, (instance, plan) in enumerate(zip(tasks, planned.tasks.values(), strict=True)):
            instance.init()
            if prepared.transaction is not None:
                prepared.transaction.tasks = tasks[: index + 1]  # a commit now covers the tasks started so far
            if plan.storage is not None and plan.storage.revert_unsealed:
                instance.commit()  # seal the restore's revert in a checkpoint before anything else
        consumers.start()
        self._resources.callback(_quietly, consumers.stop)
        return Started(tasks, consumers, tables)

    def _task_instance(
        self,
        attempt: Attempt,
        services: ContainerServices,
        prepared: Prepared,
        task_name: TaskName,
        plan: TaskPlan,
        registered: Mapping[SystemStreamPartition, str],
        tables: TableProvider,
        commit_settings: CommitSettings,
    ) -> TaskInstance:
        catch_up = {
            ssp: (offset, prepared.admins[ssp.system].offset_comparator)
            for ssp, offset in plan.starts.items()
            if registered[ssp] != offset
        }
        stores: dict[str, Any] = dict(plan.storage.stores) if plan.storage else {}
        unavailable: dict[str, str] = {}
        if prepared.adjunct is not None:
            stores.update(prepared.adjunct.stores_for(task_name))
            unavailable = prepared.adjunct.unavailable_for(task_name)
        metering = attempt.metering
        context = ContainerContext(
            task_name,
            self.config,
            frozenset(plan.ssps),
            self.container_id,
            stores,
            frozenset(plan.repositioned),
            unavailable,
            metering.task_metrics(task_name),
            tables,
            services=services,
        )
        producers = services.producers
        collector = TaskCollector(task_name, producers, services.serdes, self.task_config.drop_serialization_errors)
        return TaskInstance(
            task_name,
            prepared.task_class(),
            frozenset(plan.ssps),
            context,
            producers,
            collector,
            prepared.checkpoint_writer,
            dict(plan.last_checkpoint.offsets) if plan.last_checkpoint else {},
            catch_up,
            plan.startpoints,
            storage=plan.storage,
            commit_settings=commit_settings,
            commit_executor=None if prepared.transaction else prepared.storage.commit_executor,
            purger=CommittedMessagePurger.of(str(task_name), plan.ssps, self.config, prepared.admins),
            process_errors=prepared.process_errors,
            meters=metering.task_meters(task_name, frozenset(plan.ssps)),
            transaction=prepared.transaction,
        )

    def _run(
        self,
        attempt: Attempt,
        services: ContainerServices,
        prepared: Prepared,
        planned: Planned,
        started: Started,
        bootstrapped: Bootstrapped,
    ) -> Running:
        task_config = self.task_config
        tasks, producers = started.tasks, services.producers
        process_errors = prepared.process_errors
        dead_letters = DeadLetterPolicy(
            task_config.drop_deserialization_errors,
            task_config.dead_letter(),
            producers,
            keep_raw=process_errors.keeps_raw_bytes,
        )
        loop = RunLoop(
            started.consumers,
            tasks,
            _decoders(services.serdes, {ssp.system_stream for ssp in self.ssps}),
            dead_letters,
            RunLoopSettings(task_config.window_ms, task_config.commit_ms, task_config.poll_interval_ms),
            bootstrapped.stop_probe,
            drain=DrainMonitor.of(
                self.config, attempt.store, attempt.run_id, tasks, self.config.job.drain_poll_interval_ms
            ),
            output=producers,
            transaction=prepared.transaction,
        )
        counted = {
            "dead_lettered": lambda: dead_letters.dropped,
            "process_errors_skipped": lambda: process_errors.skipped,
            "polls": lambda: loop.stats.polls,
            "batches": lambda: loop.stats.batches,
        }
        attempt.metering.start(tasks, planned.registered, counted, started.consumers.consumers.values())
        self._report(attempt, "running")
        log.info("container %s running %d task(s) over %d partition(s)", self.container_id, len(tasks), len(self.ssps))
        self._running = running = Running(loop, tasks, dead_letters, process_errors, bootstrapped.adjunct_loop)
        freeze = self.config.job.gc_freeze and len(tasks) >= self.config.job.gc_freeze_min_tasks
        with start_up_heap_frozen(freeze):  # full collections skip what start-up made
            self._run_loop(loop, tasks)
        return running

    def _run_loop(self, loop: RunLoop, tasks: list[TaskInstance]) -> None:
        """Run the loop until it returns (a seam: a measurement replaces what the loop does)."""
        loop.run()

    def _shut_down(
        self,
        attempt: Attempt,
        services: ContainerServices,
        running: Running,
    ) -> ContainerResult:
        """The final commits, then the tasks' own ``close``; what is still open is released by the stack."""
        tasks, adjunct_loop = running.tasks, running.adjunct_loop
        for instance in tasks:
            instance.finish_commits()
        for instance in tasks:
            instance.close()
        if adjunct_loop is not None:
            adjunct_loop.stop()
            adjunct_loop.raise_if_failed()
        services.producers.stop()
        drained = any(instance.drained for instance in tasks)
        outcome = "stopped" if running.loop.stopped_by_request else "drained" if drained else "finished"
        attempt.metering.close(outcome)
        self._report(attempt, outcome)
        return self._result(attempt, running, outcome)

    def _hand_over(self, attempt: Attempt, running: Running, why: Exception) -> ContainerResult:
        """Stop without committing: a newer generation owns the checkpoints now (this one's writes are
        refused) and resumes from the last one this run wrote, so nothing acknowledged is lost."""
        newer = coordination.current_generation(attempt.store)
        message = coordination.superseded_message(attempt.store, self.generation, newer)
        log.warning("container %s: %s; stopping without a final commit", self.container_id, message)
        log.debug("container %s: noticed by: %s", self.container_id, why)
        attempt.metering.close("superseded")
        self._report(attempt, "superseded", error=message)
        return self._result(attempt, running, "superseded")

    # -- helpers --------------------------------------------------------------------------------------

    def _result(
        self,
        attempt: Attempt,
        running: Running,
        outcome: str,
    ) -> ContainerResult:
        tasks, adjunct_loop = running.tasks, running.adjunct_loop
        stats = running.loop.stats
        processing = 0.0
        if stats.first_message_at is not None and stats.last_message_at is not None:
            processing = stats.last_message_at - stats.first_message_at
        return ContainerResult(
            container_id=self.container_id,
            generation=self.generation,
            epoch=attempt.epoch,
            outcome=outcome,
            processed={str(t.task_name): t.processed for t in tasks},
            commits=sum(t.committer.commits for t in tasks),
            dropped_deserialization_errors=running.dead_letters.dropped,
            skipped_process_errors=running.process_errors.skipped,
            seconds=time.monotonic() - self._started,
            processing_seconds=processing,
            executor=self._executor,
            adjunct_stored=adjunct_loop.stored if adjunct_loop is not None else 0,
            bootstrap_seconds=adjunct_loop.bootstrap_seconds if adjunct_loop is not None else 0.0,
            waiting_for={
                str(t.task_name): sorted(
                    f"{s.system}.{s.stream} partition {s.partition}" for s in t.ssps - t.end_of_stream
                )
                for t in tasks
                if not t.finished
            },
        )

    def _hold(self, resource: _Resource) -> _Resource:
        """Keep ``resource`` until the container ends; releasing it fails quietly, so it never hides the
        error that ended the container."""
        self._resources.callback(_quietly, lambda: resource.__exit__(None, None, None))
        return resource

    def _report(self, attempt: Attempt, state: str, **details: Any) -> None:
        """Record this attempt's state; a zombie attempt's report is refused by the fence (see
        ``coordination.report_container_status``), so the live attempt's record stays."""
        coordination.report_container_status(
            attempt.store,
            self.container_id,
            self.generation,
            attempt.epoch,
            {**self._status, "state": state, **details},
            handing_over=state == "superseded",
        )


def _last_v2_checkpoint(config: Settings, store: MetadataStore, task_name: TaskName) -> Checkpoint | None:
    """A task whose stores only V2 checkpoints describe (blob store) must not resume from a V1 one: its
    input offsets would move past state the V1 cannot restore. That happens when a crash falls between
    a commit's V1 and V2 writes; the task then resumes from its last V2 (or from the start)."""
    reader = make_checkpoint_manager(config.with_overrides({"task.checkpoint.read.versions": "2"}), store, None)
    reader.start()
    try:
        checkpoint = reader.read_last_checkpoint(task_name)
    finally:
        reader.stop()
    if checkpoint is not None and not isinstance(checkpoint, CheckpointV2):
        raise ConfigError(
            f"task '{task_name}': the checkpoint manager '{config.task.checkpoint_factory}' returned a "
            f"version {checkpoint.version} checkpoint when asked for V2 only; it cannot restore stores that only "
            "V2 checkpoints describe (blob store)"
        )
    resumed = f"V2 checkpoint {checkpoint.checkpoint_id}" if isinstance(checkpoint, CheckpointV2) else "no checkpoint"
    log.warning("%s: the last checkpoint is V1, which cannot restore its stores; resuming from %s", task_name, resumed)
    return checkpoint


def _startpoint_manager(config: Settings, store: MetadataStore) -> StartpointManager | None:
    if not config.job.startpoint_enabled:
        return None
    return StartpointManager(store, config.view(StartpointConfig).max_age_ms)


def record_startpoint_failures(
    store: MetadataStore, task_name: str, failures: dict[Any, str], shown: bool | None = None
) -> None:
    """Keep the last start's unresolvable startpoints of a task where ``millstream job status`` shows them.

    ``shown``: whether a record of earlier failures exists (the container reads them all in one query); None
    reads it here."""
    if failures:
        document = {ssp.key(): reason for ssp, reason in sorted(failures.items())}
        store.put(STARTPOINT_STATUS_NAMESPACE, str(task_name), orjson.dumps(document))
        return
    if shown is None:
        shown = store.get(STARTPOINT_STATUS_NAMESPACE, str(task_name)) is not None
    if shown:
        store.delete(STARTPOINT_STATUS_NAMESPACE, str(task_name))


def _describing_consumers(services: ContainerServices, systems: set[str]) -> dict[str, SystemConsumer]:
    """The consumers the tasks will read ``systems`` through, for those whose consumers describe partitions."""
    consumers: dict[str, SystemConsumer] = {}
    for system in sorted(systems):
        if services.factory(system).describing_consumers(system, services.config):
            consumers[system] = services.new_consumer(system)
    return consumers


STORES_BUDGET = "<stores>"
"""The name the container's stores reserve their descriptors under, beside its systems' (no system's name)."""


def _reserve_store_files(config: Settings, services: ContainerServices, tasks: int) -> None:
    """Reserve the descriptors the container's stores may hold beside its systems' (``ulimit -n`` raised, or a
    ``ConfigError`` naming the keys at start), and raise the soft limit to the hard one when a store keeps every
    table file open, as a JVM does at start (``storage/open_files.py`` says why)."""
    files = store_files(config, store_names(config), tasks)
    file_limit.reserve(services, STORES_BUDGET, files.budget)
    if files.unbounded:
        file_limit.raise_to_hard(
            f"store(s) {', '.join(files.unbounded)}, whose table files stay open without bound "
            "(stores.<store>.rocksdb.max.open.files -1)"
        )


def _stop_consumers(consumers: dict[str, SystemConsumer]) -> None:
    for consumer in consumers.values():
        _quietly(consumer.stop)
    consumers.clear()


def _partition_metadata(
    admins: dict[str, SystemAdmin],
    ssps: set[SystemStreamPartition],
    described: Mapping[str, SystemConsumer],
    task_ssps: set[SystemStreamPartition],
) -> dict[Any, Any]:
    """Every partition's metadata: the tasks' partitions of a system in ``described`` from its consumer when it
    describes partitions, the rest from the system's admin."""
    metadata: dict[Any, Any] = {}
    for system, admin in admins.items():
        wanted = {ssp for ssp in ssps if ssp.system == system}
        consumer = described.get(system)
        if isinstance(consumer, DescribingSystemConsumer):
            metadata.update(consumer.describe(sorted(wanted & task_ssps)))
            wanted -= task_ssps
        metadata.update(admin.get_ssp_metadata(sorted(wanted)))
    missing = sorted(ssps - metadata.keys())
    if missing:
        ssp = missing[0]
        raise StreamNotFoundError(ssp.system, ssp.stream, f"partition {ssp.partition} is not available")
    return metadata


def _register_consumers(
    services: ContainerServices,
    registered: Mapping[SystemStreamPartition, str],
    described: dict[str, SystemConsumer] | None = None,
) -> dict[str, Any]:
    """Each system's consumer with its partitions registered: the one in ``described`` (taken out of it once its
    partitions are registered, so that a registration that fails leaves it to be stopped there), else a new one."""
    described = {} if described is None else described
    consumers = {}
    for system in sorted({ssp.system for ssp in registered}):
        consumer = described.get(system) or services.new_consumer(system)
        for ssp, offset in sorted(registered.items()):
            if ssp.system == system:
                consumer.register(ssp, offset)
        consumers[system] = described.pop(system, consumer)
    return consumers


def _decoders(
    serdes: SerdeRegistry, streams: set[SystemStream]
) -> dict[SystemStream, tuple[Decoder | None, Decoder | None]]:
    decoders: dict[SystemStream, tuple[Decoder | None, Decoder | None]] = {}
    for stream in streams:
        key_serde, msg_serde = serdes.key_serde(stream), serdes.msg_serde(stream)
        decoders[stream] = (
            key_serde.from_bytes if key_serde else None,
            msg_serde.from_bytes if msg_serde else None,
        )
    return decoders


def _adjunct_checked(probe: Callable[[], bool], loop: AdjunctLoop) -> Callable[[], bool]:
    """The stop check also raises, on the container's thread, what failed the adjunct loop."""

    def stop_requested() -> bool:
        loop.raise_if_failed()
        return probe()

    return stop_requested


class DeterministicFailureError(MillstreamError):
    """The container's generation already failed for good — deterministically (a retry would fail the same way),
    or past the restart strategy's failure-rate limit."""


class SupersededError(MillstreamError):
    """Another run of the job published a newer generation while this container ran."""


class _NotStartingError(Exception):
    """An attempt that does not start (``outcome``: ``superseded`` or ``failed``), with the attempt it is."""

    def __init__(self, outcome: str, epoch: int, error: MillstreamError) -> None:
        super().__init__(str(error))
        self.outcome = outcome
        self.epoch = epoch
        self.error = error


def _close_tables(tables: TableProvider) -> None:
    """The remote tables' fetches in flight end and their definitions' ``close`` runs, on the loop."""
    if tables.tables:
        try:
            run_hook(tables.close())
        except Exception as error:  # a user's close: reported, and the container's cleanup goes on
            log.warning("ignored while closing the remote tables: %s: %s", type(error).__name__, error)


def _stop_probe(
    store: MetadataStore, generation: int, stop_event: threading.Event | None, driver: DriverWatch, container_id: str
) -> Callable[[], bool]:
    """Whether the container should commit and stop: the runner's stop event, a stop request in the store, or a
    lost driver (a container never runs headless); a newer generation raises :class:`SupersededError`."""

    def stop_requested() -> bool:
        if stop_event is not None and stop_event.is_set():
            return True
        if (current := coordination.current_generation(store)) > generation:
            raise SupersededError(coordination.superseded_message(store, generation, current))
        if driver.lost_reason is None and driver.lost():
            log.error("container %s: %s; committing and stopping", container_id, driver.lost_reason)
            return True
        return driver.lost_reason is not None or coordination.stop_requested(store, generation)

    return stop_requested


def _restart_cause(previous: Mapping[str, Any], generation: int) -> str:
    """Why this attempt started, from the status the previous attempt of the container left: its error's first
    line when it failed, else that it ended without a word (SIGKILLed, its host lost)."""
    if previous.get("generation") == generation and previous.get("state") == "failed" and previous.get("error"):
        return f"attempt {previous.get('attempt')} failed: {str(previous['error']).splitlines()[0]}"
    return f"attempt {previous.get('attempt', '?')} ended without reporting a cause (killed, or its host lost)"


def _quietly(action: Callable[[], Any]) -> None:
    try:
        action()
    except (MillstreamError, OSError) as error:
        log.warning("ignored during container cleanup: %s", error)
