"""The container's systems as state backends see them (``SystemAccess``): shared admins, the
container's producers (so a commit's producer flush covers changelog writes), and fresh consumers and
producers for restores, which run on their own threads."""

from __future__ import annotations

import threading

from millstream.config.core import Config
from millstream.systems.base import SystemAdmin, SystemConsumer, SystemProducer
from millstream.systems.producers import ProducerPool
from millstream.systems.registry import system_factory


class ContainerSystems:
    """Thread-safe: restores of several tasks ask for admins at once."""

    def __init__(self, config: Config, producers: ProducerPool) -> None:
        self.config = config
        self.producers = producers
        self._admins: dict[str, SystemAdmin] = {}
        self._lock = threading.Lock()

    def admin(self, system: str) -> SystemAdmin:
        with self._lock:
            admin = self._admins.get(system)
            if admin is None:
                admin = system_factory(self.config, system).get_admin(system, self.config)
                admin.start()
                self._admins[system] = admin
            return admin

    def producer(self, system: str) -> SystemProducer:
        with self._lock:
            return self.producers.state_producer(system)

    def new_consumer(self, system: str) -> SystemConsumer:
        return system_factory(self.config, system).get_consumer(system, self.config)

    def new_producer(self, system: str) -> SystemProducer:
        return self.producers.new_producer(system)

    def stop(self) -> None:
        with self._lock:
            admins, self._admins = self._admins, {}
        for admin in admins.values():
            admin.stop()
