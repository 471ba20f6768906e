"""The services of one container, built once by the container (its composition root) and handed down.

Everything a container's parts need from outside the process goes through :class:`ContainerServices`, so
that a container opens each of them once, shares them, and closes them at its end:

* **system factories and admins**: one factory and one started admin per system, shared by every phase and
  thread of the container (planning, the purger, storage restores and backups, the adjunct loop, the lag
  gauges, the operator graph). ``SystemAdmin`` implementations are thread-safe (see ``SystemAccess``);
* **metadata-store connections**, one per thread that writes or polls on its own (:data:`STORE_PURPOSES`):
  ``container`` (the container's thread: fencing, status reports, checkpoints, startpoints, drains, the stop
  probe, the operator graph's control state; the heartbeat thread beats through it too, as it always did),
  ``metrics`` (the snapshot thread) and ``adjunct`` (the adjunct loop). A system factory gets more through its
  :class:`~millstream.contracts.systems.SystemContext` only where a client runs threads of its own (a Kinesis
  consumer's leases) or asks once (Kafka's fence check);
* **the producer pool**: every producer of the container writes under its writer token (the attempt), the
  metrics stream's included;
* **serdes** and **the metrics registry** (None when metrics are off);
* **the open-file limit**: a system's first use reserves the descriptors its config lets it hold
  (:mod:`~millstream.runtime.file_limit`), which fails the container at start when ``ulimit -n`` is too low.

Only this module (with the driver's composition roots) imports the system registry and the metadata-store
opener; the rest of the container side is handed what it needs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Self

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metrics import Registry
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.contracts.systems import (
    SystemAdmin,
    SystemConsumer,
    SystemContext,
    SystemFactory,
    SystemProducer,
    WriterToken,
)
from millstream.control.budget import BudgetSettings
from millstream.control.combining import WatermarkCombiner
from millstream.errors import MillstreamError
from millstream.runtime import file_limit
from millstream.serde.registry import SerdeRegistry
from millstream.systems.producers import ProducerPool

log = logging.getLogger(__name__)

STORE_PURPOSES = ("container", "metrics", "adjunct")
"""The container's metadata-store connections, one per thread that uses the store on its own: the
container's thread (the heartbeat thread shares it), the metrics snapshot thread, the adjunct loop."""


class SystemAdmins:
    """One started admin per system, opened on first use and stopped by :meth:`stop`; thread-safe."""

    def __init__(self, config: Settings, factory: Callable[[str], SystemFactory]) -> None:
        self._config = config
        self._factory = factory
        self._admins: dict[str, SystemAdmin] = {}
        self._lock = threading.Lock()

    def __call__(self, system: str) -> SystemAdmin:
        """The started admin of ``system``."""
        with self._lock:
            admin = self._admins.get(system)
            if admin is None:
                admin = self._factory(system).get_admin(system, self._config)
                admin.start()
                self._admins[system] = admin
            return admin

    def of(self, systems: Iterable[str]) -> dict[str, SystemAdmin]:
        """The admins of ``systems``, by system, in name order."""
        return {system: self(system) for system in sorted(set(systems))}

    def stop(self) -> None:
        with self._lock:
            admins, self._admins = self._admins, {}
        for system, admin in admins.items():
            try:
                admin.stop()
            except Exception as error:  # every admin gets its chance to stop; the container is ending
                log.warning("system '%s': its admin failed to stop: %s", system, error)


class ContainerServices:
    """The container's admins, metadata-store connections, producers, serdes and metrics registry.

    Built once per container attempt (``writer``), closed once at its end: producers first (their final
    flush may need the admins' systems), then admins, then the store connections it opened (a store it was
    given belongs to its giver). Implements the state backends' ``SystemAccess``."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __init__(
        self,
        config: Config,
        container_id: str | None = None,
        *,
        writer: WriterToken | None = None,
        store: MetadataStore | None = None,
    ) -> None:
        self.config = Settings.of(config)
        """The container's settings: what the driver prepared and shipped, each view parsed once here."""
        config = self.config
        self.writer = writer
        """The container's attempt: every producer writes on its behalf (None outside a container until
        :meth:`start_attempt`)."""
        self.registry: Registry | None = None
        """The container's metrics registry; None when metrics are off (``metrics.*``)."""
        if container_id is not None and config.view(MetricsConfig).active:
            self.registry = Registry({"container": container_id})
        self.serdes = SerdeRegistry.from_config(config)
        self.system_context = SystemContext(self._extra_store)
        self._factories: dict[str, SystemFactory] = {}
        self._factory_lock = threading.Lock()
        self._producer_lock = threading.Lock()
        self._store_lock = threading.Lock()
        self.admins = SystemAdmins(config, self.factory)
        self.producers = ProducerPool(config, writer, self.factory)
        self._stores: dict[str, MetadataStore] = {}
        self._given_store = store
        self._closed = False
        self._combiner: WatermarkCombiner | None = None

    def start_attempt(self, writer: WriterToken) -> None:
        """The container's attempt is known once it fenced the earlier ones: from now on every producer
        writes on its behalf. Refused once a producer exists, which would write without it."""
        if self.producers.started:
            raise MillstreamError(f"container {writer.container_id}: producers were built before its attempt")
        self.writer = self.producers.writer = writer

    def watermark_combiner(
        self, interval_ms: int, boundary_ms: int, aggregate: bool = False, budget: BudgetSettings | None = None
    ) -> WatermarkCombiner:
        """The attempt's one ``WatermarkCombiner``, which its graph tasks share to send one watermark record per
        partition (``aggregate``: to the aggregate partition) for all of them (built at the first task's init;
        every call comes from the run-loop thread, as the tasks' init and processing do). A new attempt has new
        services, hence an empty combiner."""
        if self._combiner is None:
            self._combiner = WatermarkCombiner(interval_ms, boundary_ms, aggregate=aggregate, budget=budget)
        return self._combiner

    # -- systems --------------------------------------------------------------------------------------

    def factory(self, system: str) -> SystemFactory:
        """The factory of ``system``, bound to the container's :class:`SystemContext`; built once."""
        with self._factory_lock:
            factory = self._factories.get(system)
            if factory is None:
                factory = system_factory(self.config, system, self.system_context)
                file_limit.reserve(self, system, factory.file_budget(system, self.config))
                self._factories[system] = factory
            return factory

    def admin(self, system: str) -> SystemAdmin:
        """The container's started admin of ``system``, shared and safe to use from several threads."""
        return self.admins(system)

    def producer(self, system: str) -> SystemProducer:
        """The container's state producer of ``system`` (``SystemAccess``: it holds the transactional id)."""
        with self._producer_lock:
            return self.producers.state_producer(system)

    def new_consumer(self, system: str) -> SystemConsumer:
        """A fresh consumer of ``system`` the caller registers, starts and stops."""
        return self.factory(system).get_consumer(system, self.config)

    def new_producer(self, system: str) -> SystemProducer:
        """A fresh, started producer under the container's writer token; the caller flushes and stops it."""
        return self.producers.new_producer(system)

    # -- the metadata store ---------------------------------------------------------------------------

    def metadata_store(self, purpose: str = "container") -> MetadataStore:
        """The connection of ``purpose`` (one of :data:`STORE_PURPOSES`), opened on first use and closed by
        :meth:`close`; ``container`` is the store the container was given, when it was given one."""
        if purpose not in STORE_PURPOSES:
            raise MillstreamError(f"no metadata-store connection for '{purpose}': one of {', '.join(STORE_PURPOSES)}")
        if purpose == "container" and self._given_store is not None:
            return self._given_store
        with self._store_lock:
            store = self._stores.get(purpose)
            if store is None:
                store = self._stores[purpose] = metadata_store(self.config)
            return store

    def _extra_store(self) -> MetadataStore:
        """A connection a system's client opens for a thread of its own and closes itself."""
        return metadata_store(self.config)

    # -- the end --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the producers and admins and close the connections opened here; idempotent. Each is released
        even when an earlier one fails; the first failure is raised after."""
        if self._closed:
            return
        self._closed = True
        errors: list[Exception] = []
        for release in (self.producers.stop, self.admins.stop, self._close_stores, lambda: file_limit.release(self)):
            try:
                release()
            except Exception as error:  # the rest must still be released
                errors.append(error)
        if errors:
            raise errors[0]

    def _close_stores(self) -> None:
        with self._store_lock:
            stores, self._stores = self._stores, {}
        for purpose, store in stores.items():
            try:
                store.close()
            except Exception as error:  # every connection gets its chance to close
                log.warning("the metadata-store connection of '%s' failed to close: %s", purpose, error)
