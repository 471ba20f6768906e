"""A container: hosts the tasks the JobModel gives it, from startup to a committed stop.

Startup fences off every earlier attempt of this container (a new epoch in the metadata store), so a
zombie attempt left behind by a retried Spark task can never overwrite this attempt's checkpoints.
The container runs without Spark: the Spark runner calls :func:`run_container` inside a Spark task,
the in-process runner calls it from a thread.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from millstream.adjunct.loop import AdjunctLoop
from millstream.adjunct.manager import AdjunctContext, AdjunctDataStoreManager, adjunct_data_store_manager
from millstream.api.task import StreamTask
from millstream.checkpoint.base import WriterFence
from millstream.checkpoint.checkpoint import Checkpoint, CheckpointV1, CheckpointV2
from millstream.checkpoint.factory import checkpoint_manager as make_checkpoint_manager
from millstream.checkpoint.offset_manager import OffsetManager, keep_earliest
from millstream.config import Config, JobConfig, TaskConfig
from millstream.config.views import StartpointConfig, adjunct_store_names, stream_samza
from millstream.errors import ConfigError, MillstreamError, StreamNotFoundError
from millstream.job_model import JobModel
from millstream.metadata import coordination
from millstream.metadata.base import FencedError, MetadataStore
from millstream.metadata.factory import metadata_store
from millstream.model import SystemStream, SystemStreamPartition, TaskName
from millstream.plugins import load_object
from millstream.runtime.collector import TaskCollector
from millstream.runtime.run_loop import (
    DeadLetterPolicy,
    Decoder,
    RunLoop,
    RunLoopSettings,
    SystemConsumers,
)
from millstream.runtime.task_instance import AppliedStartpoints, CommitSettings, ContainerContext, TaskInstance
from millstream.serde.registry import SerdeRegistry
from millstream.startpoint.manager import STARTPOINT_STATUS_NAMESPACE, StartpointManager
from millstream.storage.managers.stores import ContainerStorageManager, TaskStorageManager
from millstream.systems.base import SystemAdmin
from millstream.systems.producers import ProducerPool
from millstream.systems.registry import system_factory

log = logging.getLogger(__name__)


@dataclass
class ContainerResult:
    """What a container reports back to the driver: never data, only a summary."""

    container_id: str
    generation: int
    epoch: int
    outcome: str  # "finished" (inputs ended or shutdown requested) or "stopped" (stop signal)
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

    @property
    def messages(self) -> int:
        return sum(self.processed.values())


def load_task_class(config: Config) -> type:
    """Import ``task.class``; a module beside the config file is importable without packaging."""
    name = TaskConfig.of(config).class_name
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


def run_container(
    config: Config,
    job_model: JobModel,
    container_id: str,
    *,
    stop_event: threading.Event | None = None,
    executor: dict[str, Any] | None = None,
    store: MetadataStore | None = None,
) -> ContainerResult:
    """Run container ``container_id`` of ``job_model`` until its inputs end or it is told to stop."""
    started = time.monotonic()
    owns_store = store is None
    store = store or metadata_store(config)
    epoch = coordination.start_container_attempt(store, container_id)
    generation = job_model.generation
    if coordination.current_generation(store) != generation:
        raise FencedError(
            f"container {container_id} belongs to generation {generation}, but the job is at generation "
            f"{coordination.current_generation(store)}"
        )
    fence = WriterFence(generation, container_id, epoch)
    status = {"pid": os.getpid(), "host": socket.gethostname(), "attempt": epoch, "generation": generation}
    status.update(executor or {})
    coordination.report_container_status(store, container_id, {**status, "state": "starting"})
    log.info("container %s (generation %s, attempt %s) starting", container_id, generation, epoch)

    task_config = TaskConfig.of(config)
    serdes = SerdeRegistry.from_config(config)
    model = job_model.containers[container_id]
    ssps = {ssp for task in model.tasks.values() for ssp in task.ssps}
    admins = _start_admins(config, {ssp.system for ssp in ssps})
    producers = ProducerPool(config)
    consumers: SystemConsumers | None = None
    checkpoints = make_checkpoint_manager(config, store, fence)
    checkpoints.start()
    storage = ContainerStorageManager(config, job_model, container_id, store, producers, serdes)
    task_storage: dict[Any, TaskStorageManager] = {}
    adjunct: AdjunctDataStoreManager | None = None
    adjunct_store: MetadataStore | None = None
    adjunct_loop: AdjunctLoop | None = None
    adjunct_consumers: SystemConsumers | None = None
    try:
        if adjunct_store_names(config):
            adjunct_store = metadata_store(config)  # the adjunct loop's own connection: it runs on its own thread
            adjunct = adjunct_data_store_manager(
                AdjunctContext(config, job_model, container_id, adjunct_store, serdes, admins)
            )
        adjunct_ssps = adjunct.ssps if adjunct is not None else frozenset()
        main_ssps = {name: task_model.ssps - adjunct_ssps for name, task_model in model.tasks.items()}
        metadata = _partition_metadata(admins, ssps)
        offsets = OffsetManager(config, admins)
        task_class = load_task_class(config)
        tasks: list[TaskInstance] = []
        registered: dict[SystemStreamPartition, str] = {}
        starts: dict[Any, dict[SystemStreamPartition, str]] = {}
        last_checkpoints = {}
        startpoints = _startpoint_manager(config, store)
        applied: dict[Any, AppliedStartpoints] = {}
        repositioned: dict[Any, set[SystemStreamPartition]] = {}
        for task_name, task_model in sorted(model.tasks.items(), key=lambda kv: kv[0].sort_key()):
            checkpoints.register(task_name)
            last = checkpoints.read_last_checkpoint(task_name)
            if (task_store := storage.task_storage(task_name, task_model)) is not None:
                task_storage[task_name] = task_store
                if isinstance(last, CheckpointV1) and not task_store.restorable_from_v1:
                    last = _last_v2_checkpoint(config, store, task_name)
            last_checkpoints[task_name] = last
            starts[task_name] = offsets.starting_offsets(task_name, main_ssps[task_name], last, metadata)
            repositioned[task_name] = {
                ssp for ssp in main_ssps[task_name] if stream_samza(config, ssp.system_stream).reset_offset
            }
            if startpoints is not None:
                fan_out = startpoints.get_fan_out_for_task(task_name)
                resolution = offsets.apply_startpoints(task_name, starts[task_name], fan_out)
                starts[task_name] = resolution.offsets
                repositioned[task_name].update(resolution.applied)
                record_startpoint_failures(store, task_name, resolution.failures)
                in_use = {ssp for ssp in fan_out if ssp in main_ssps[task_name]}
                if in_use:
                    applied[task_name] = AppliedStartpoints(startpoints, task_name, in_use)
            keep_earliest(registered, starts[task_name], admins)
        if task_storage:
            coordination.report_container_status(store, container_id, {**status, "state": "restoring"})
            storage.restore({name: (task_store, last_checkpoints[name]) for name, task_store in task_storage.items()})
        stop_probe = _stop_probe(store, generation, stop_event)
        if adjunct is not None:
            coordination.report_container_status(store, container_id, {**status, "state": "bootstrapping"})
            adjunct_starts = adjunct.start(metadata)
            adjunct_consumers = SystemConsumers(_register_consumers(config, adjunct_starts))
            adjunct_consumers.start()
            adjunct_loop = AdjunctLoop(
                adjunct,
                adjunct_consumers,
                adjunct_starts,
                metadata,
                admins,
                commit_ms=task_config.commit_ms,
                poll_interval_ms=task_config.poll_interval_ms,
            )
            adjunct_loop.bootstrap(stop_probe)
            adjunct_loop.start()
            stop_probe = _adjunct_checked(stop_probe, adjunct_loop)
        commit_settings = CommitSettings.of(config, storage.pause)
        for task_name in sorted(model.tasks, key=lambda name: name.sort_key()):
            catch_up = {
                ssp: (offset, admins[ssp.system].offset_comparator)
                for ssp, offset in starts[task_name].items()
                if registered[ssp] != offset
            }
            task_store = task_storage.get(task_name)
            stores: dict[str, Any] = dict(task_store.stores) if task_store else {}
            unavailable: dict[str, str] = {}
            if adjunct is not None:
                stores.update(adjunct.stores_for(task_name))
                unavailable = adjunct.unavailable_for(task_name)
            context = ContainerContext(
                task_name,
                config,
                main_ssps[task_name],
                container_id,
                stores,
                frozenset(repositioned[task_name]),
                unavailable,
            )
            last = last_checkpoints[task_name]
            instance = TaskInstance(
                task_name,
                task_class(),
                main_ssps[task_name],
                context,
                producers,
                TaskCollector(task_name, producers, serdes, task_config.drop_serialization_errors),
                checkpoints,
                dict(last.offsets) if last else {},
                catch_up,
                applied.get(task_name),
                storage=task_store,
                commit_settings=commit_settings,
                commit_executor=storage.commit_executor if task_store is not None else None,
            )
            tasks.append(instance)
        consumers = SystemConsumers(_register_consumers(config, registered))
        for instance in tasks:
            instance.init()
        consumers.start()
        dead_letters = DeadLetterPolicy(task_config.drop_deserialization_errors, task_config.dead_letter(), producers)
        loop = RunLoop(
            consumers,
            tasks,
            _decoders(serdes, {ssp.system_stream for ssp in ssps}),
            dead_letters,
            RunLoopSettings(task_config.window_ms, task_config.commit_ms, task_config.poll_interval_ms),
            stop_probe,
        )
        coordination.report_container_status(store, container_id, {**status, "state": "running"})
        log.info("container %s running %d task(s) over %d partition(s)", container_id, len(tasks), len(ssps))
        loop.run()
        for instance in tasks:
            instance.finish_commits()
        for instance in tasks:
            instance.close()
        if adjunct_loop is not None:
            adjunct_loop.stop()
            adjunct_loop.raise_if_failed()
        producers.stop()
        outcome = "stopped" if loop.stopped_by_request else "finished"
        coordination.report_container_status(store, container_id, {**status, "state": outcome})
        stats = loop.stats
        processing = (
            (stats.last_message_at - stats.first_message_at)
            if stats.first_message_at is not None and stats.last_message_at is not None
            else 0.0
        )
        return ContainerResult(
            container_id=container_id,
            generation=generation,
            epoch=epoch,
            outcome=outcome,
            processed={str(t.task_name): t.processed for t in tasks},
            commits=sum(t.commits for t in tasks),
            dropped_deserialization_errors=dead_letters.dropped,
            seconds=time.monotonic() - started,
            processing_seconds=processing,
            executor=executor or {},
            adjunct_stored=adjunct_loop.stored if adjunct_loop is not None else 0,
            bootstrap_seconds=adjunct_loop.bootstrap_seconds if adjunct_loop is not None else 0.0,
        )
    except BaseException as error:
        coordination.report_container_status(store, container_id, {**status, "state": "failed", "error": str(error)})
        raise
    finally:
        _quietly(lambda: consumers.stop() if consumers else None)
        if adjunct_loop is not None:
            _quietly(adjunct_loop.stop)
        _quietly(lambda: adjunct_consumers.stop() if adjunct_consumers else None)
        _quietly(lambda: adjunct.close() if adjunct else None)
        _quietly(lambda: adjunct_store.close() if adjunct_store else None)
        for task_store in task_storage.values():
            _quietly(task_store.close)
        _quietly(storage.close)
        _quietly(producers.stop)
        _quietly(checkpoints.stop)
        for admin in admins.values():
            _quietly(admin.stop)
        if owns_store:
            _quietly(store.close)


def _last_v2_checkpoint(config: Config, store: MetadataStore, task_name: TaskName) -> Checkpoint | None:
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
            f"task '{task_name}': the checkpoint manager '{TaskConfig.of(config).checkpoint_factory}' returned a "
            f"version {checkpoint.version} checkpoint when asked for V2 only; it cannot restore stores that only "
            "V2 checkpoints describe (blob store)"
        )
    resumed = f"V2 checkpoint {checkpoint.checkpoint_id}" if isinstance(checkpoint, CheckpointV2) else "no checkpoint"
    log.warning("%s: the last checkpoint is V1, which cannot restore its stores; resuming from %s", task_name, resumed)
    return checkpoint


def _startpoint_manager(config: Config, store: MetadataStore) -> StartpointManager | None:
    if not JobConfig.of(config).startpoint_enabled:
        return None
    return StartpointManager(store, StartpointConfig.of(config).max_age_ms)


def record_startpoint_failures(store: MetadataStore, task_name: str, failures: dict[Any, str]) -> None:
    """Keep the last start's unresolvable startpoints of a task where ``millstream job status`` shows them."""
    if failures:
        document = {ssp.key(): reason for ssp, reason in sorted(failures.items())}
        store.put(STARTPOINT_STATUS_NAMESPACE, str(task_name), orjson.dumps(document))
    elif store.get(STARTPOINT_STATUS_NAMESPACE, str(task_name)) is not None:
        store.delete(STARTPOINT_STATUS_NAMESPACE, str(task_name))


def _start_admins(config: Config, systems: set[str]) -> dict[str, SystemAdmin]:
    admins = {}
    for system in sorted(systems):
        admin = system_factory(config, system).get_admin(system, config)
        admin.start()
        admins[system] = admin
    return admins


def _partition_metadata(admins: dict[str, SystemAdmin], ssps: set[SystemStreamPartition]) -> dict[Any, Any]:
    metadata: dict[Any, Any] = {}
    for system, admin in admins.items():
        metadata.update(admin.get_ssp_metadata(ssp for ssp in ssps if ssp.system == system))
    missing = sorted(ssps - metadata.keys())
    if missing:
        ssp = missing[0]
        raise StreamNotFoundError(ssp.system, ssp.stream, f"partition {ssp.partition} is not available")
    return metadata


def _register_consumers(config: Config, registered: dict[SystemStreamPartition, str]) -> dict[str, Any]:
    consumers = {}
    for system in sorted({ssp.system for ssp in registered}):
        consumer = system_factory(config, system).get_consumer(system, config)
        for ssp, offset in sorted(registered.items()):
            if ssp.system == system:
                consumer.register(ssp, offset)
        consumers[system] = consumer
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


def _stop_probe(store: MetadataStore, generation: int, stop_event: threading.Event | None) -> Callable[[], bool]:
    def stop_requested() -> bool:
        if stop_event is not None and stop_event.is_set():
            return True
        return coordination.stop_requested(store, generation) or coordination.current_generation(store) > generation

    return stop_requested


def _quietly(action: Callable[[], Any]) -> None:
    try:
        action()
    except (MillstreamError, OSError) as error:
        log.warning("ignored during container cleanup: %s", error)
