"""The driver side of a job: from config to a published JobModel.

It reads the input streams' partitions from their systems, groups partitions into tasks and tasks
into containers, and publishes the model under the next generation number. Publishing a new
generation fences every container of the previous one: their checkpoint writes are refused, every
system fences their producers (``SystemAdmin.fence_writers``), and they stop at their next stop check.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from millstream.checkpoint.factory import checkpoint_factory
from millstream.config.settings import Settings
from millstream.config.views import system_names
from millstream.contracts import coordination
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import StreamSpec, SystemAdmin
from millstream.coordinator.groupers import group_containers, group_tasks, grouper_for
from millstream.coordinator.services import DriverServices
from millstream.errors import ConfigError, StreamNotFoundError
from millstream.job_model import JOB_MODEL_NAMESPACE, JobModel
from millstream.model import SystemStreamPartition
from millstream.runtime.container import load_task_class
from millstream.startpoint.manager import StartpointManager
from millstream.startpoint.settings import StartpointConfig
from millstream.storage.managers.resources import prepare_state_resources

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobPlan:
    model: JobModel
    input_partitions: dict[str, int]


class JobCoordinator:
    """Plans and publishes a job's generations with the driver's ``services`` (its admins: one per system for
    the whole run); without them, with services of each call alone, closed when it returns."""

    def __init__(self, config: Settings, store: MetadataStore, services: DriverServices | None = None) -> None:
        self.config = config
        self.store = store
        self.services = services

    @contextmanager
    def _services(self) -> Iterator[DriverServices]:
        if self.services is not None:
            yield self.services
            return
        with DriverServices(self.config, store=self.store) as own:
            self.services = own
            try:
                yield own
            finally:
                self.services = None

    def plan(self) -> JobPlan:
        """Compute (but do not publish) the JobModel of the next generation; fails on bad config or streams."""
        with self._services() as services:
            return self._plan(services)

    def _plan(self, services: DriverServices) -> JobPlan:
        job = self.config.job
        task = self.config.task
        if self.config.get("app.class"):  # a high-level application reads intermediate streams it creates
            from millstream.operators.planner import prepare_application

            prepare_application(self.config, services.admin)
        load_task_class(self.config)
        inputs = task.input_streams()
        broadcast = task.broadcast_ssps()
        adjunct = self.config.adjunct_streams()
        if not set(inputs) - set(adjunct) and not {ssp.system_stream for ssp in broadcast} - set(adjunct):
            raise ConfigError("config key 'task.inputs' is empty: a job needs at least one input stream")
        broadcast_streams = {ssp.system_stream for ssp in broadcast}
        # a partitioned adjunct stream is grouped like any input, so each task gets its partitions' store
        inputs = inputs + [s for s in adjunct if s not in inputs and s not in broadcast_streams]
        streams = sorted(set(inputs) | {ssp.system_stream for ssp in broadcast})
        ssps: set[SystemStreamPartition] = set()
        partitions: dict[str, int] = {}
        for system in sorted({stream.system for stream in streams}):
            services.factory(system).validate_job(system, self.config)
            names = [stream.stream for stream in streams if stream.system == system]
            found = _partitions_of(services.admin(system), names)
            for name in names:
                if name not in found:
                    raise StreamNotFoundError(
                        system, name, "create it first (millstream streams create) or fix task.inputs"
                    )
                partitions[f"{system}.{name}"] = len(found[name])
                ssps.update(SystemStreamPartition(system, name, p) for p in found[name])
        self._ensure_dead_letter_stream(services)
        unknown_broadcast = sorted(broadcast - ssps)
        if unknown_broadcast:
            raise ConfigError(f"config key 'task.broadcast.inputs' names {unknown_broadcast[0]}, which does not exist")
        regular = {ssp for ssp in ssps if ssp.system_stream in set(inputs)}
        tasks = group_tasks(grouper_for(job.grouper_factory), regular | broadcast, broadcast)
        containers = group_containers(tasks, job.container_count)
        generation = coordination.current_generation(self.store) + 1
        return JobPlan(JobModel(generation, containers), partitions)

    def publish(self, model: JobModel) -> None:
        """Store the model and make its generation current; older containers are fenced from now on."""
        data = model.to_bytes()
        self.store.put(JOB_MODEL_NAMESPACE, str(model.generation), data)
        self.store.put(JOB_MODEL_NAMESPACE, "latest", data)
        coordination.clear_stop(self.store)
        coordination.clear_drains(self.store)  # a drain request belongs to the run it stopped
        coordination.clear_restart(self.store)  # a new generation applies every pending startpoint anyway
        coordination.clear_failures(self.store)  # a new generation (often fixed code) counts failures again
        coordination.publish_generation(self.store, model.generation)
        log.info(
            "published job model generation %s: %d container(s), %d task(s)",
            model.generation,
            len(model.containers),
            len(model.tasks),
        )

    def start(self) -> JobModel:
        """Plan, claim the checkpoint topic, prepare state resources (changelog partitions and streams, their
        owners, buckets), publish, and fan startpoints out to the new model's tasks (``job.startpoint.enabled``).
        A durable stream another job owns stops the start here, before any container runs.

        This driver supersedes every earlier run of the job, so its store may break a write lock held past its
        lease (``MetadataStore.take_over``): a paused container of an older run cannot stop the takeover."""
        self.store.set_writer("the driver")
        self.store.take_over()
        with self._services() as services:
            plan = self._plan(services)
            self._claim_checkpoint_resources()
            prepare_state_resources(self.config, self.store, plan.model, services.admin)
            previous = coordination.latest_job_model(self.store)
            self.publish(plan.model)
            if previous is not None:
                self._fence_writers(services, previous)
        if self.config.job.startpoint_enabled:
            manager = StartpointManager(self.store, self.config.view(StartpointConfig).max_age_ms)
            manager.fan_out(plan.model.task_to_ssps())
        return plan.model

    def _claim_checkpoint_resources(self) -> None:
        """``CheckpointManagerFactory.claim_resources``; a factory registered as a virtual subclass
        (``CheckpointManagerFactory.register``) before the hook existed has none and claims nothing."""
        claim = getattr(checkpoint_factory(self.config), "claim_resources", None)
        if claim is not None:
            claim(self.config)

    def fence_writers(self, previous: JobModel) -> None:
        """Fence every producer of the previous generation's containers in every system, before any
        container of the new generation restores. A task the new model moved to another container would
        otherwise keep a zombie writer: Kafka fences a producer only when a producer of the same
        ``transactional.id`` (the same container id) starts, so the zombie could commit changelog records
        that the new owner's next checkpoint covers. Done after publishing, so no attempt of the previous
        generation starts (and takes its id back) afterwards."""
        with self._services() as services:
            self._fence_writers(services, previous)

    def _fence_writers(self, services: DriverServices, previous: JobModel) -> None:
        job = self.config.job.job_key
        for system in system_names(self.config):
            services.admin(system).fence_writers(job, sorted(previous.containers))
        log.info("fenced the writers of generation %s's %d container(s)", previous.generation, len(previous.containers))

    def _ensure_dead_letter_stream(self, services: DriverServices) -> None:
        dead_letter = self.config.task.dead_letter()
        if dead_letter is None:
            return
        if services.admin(dead_letter.system).create_stream(StreamSpec(dead_letter.system, dead_letter.stream, 1)):
            log.info("created dead-letter stream %s", dead_letter)


def _partitions_of(admin: SystemAdmin, streams: list[str]) -> dict[str, Collection[int]]:
    """The partitions of each existing stream among ``streams``: numbered from 0 by its count where the system's
    partitions are fixed (one read per stream), else as its metadata lists them (Kinesis shards)."""
    if admin.partitions_are_fixed:
        return {stream: range(count) for stream, count in admin.partition_counts(streams).items()}
    metadata = admin.get_system_stream_metadata(streams)
    return {stream: described.partitions.keys() for stream, described in metadata.items()}
