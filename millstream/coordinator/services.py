"""``DriverServices``: the one owner of what a job's driver opens: its systems' admins and its metadata-store
connections.

Each driver-side composition root (the ``Job`` façade, the CLI commands, ``InProcessRunner`` and the Spark
runner's driver loop) builds one, passes it down, and closes it when the job or command ends. Everything
below the roots takes the services, or the one admin or store it needs, as an argument; this module is the
only one of the coordinator that imports the system registry and the metadata-store opener. So one
``millstream run`` opens each system's admin once, however many steps (validation, intermediate streams,
planning, the dead-letter stream, fencing, each generation) use it.

Guarantees:

* **Admins**: one per system and thread that uses it, created and started on first use (``admin``), stopped
  by ``close``; callers never stop an admin they got here. A thread never uses another's: the driver's threads
  are few, and an admin of their own spares them waiting on each other (a container shares one per system).
  The driver's thread does all of a run's planning (validation, intermediate and dead-letter streams, each
  generation's model, fencing): one run opens each system's admin once there. The other threads that use
  admins read lag: the status server's request thread (``/status.json``) and the CLI's progress line.
* **Metadata store**: one connection per thread that asks for one (``store``), opened (``init``) on first use
  and closed by ``close``, for the same reason. The threads that ask are the driver's own thread (planning,
  publishing, the driver loop's checks, the CLI's commands), the status server's request thread and the CLI's
  progress line. A store handed in at construction
  (``store=``, a runner that opened its own) serves the constructing thread and is left open: its opener
  closes it. The driver's heartbeat keeps a connection of its own (``runtime/heartbeat.py``), so that a beat
  waiting for the store's write lock never blocks the driver's liveness checks.
* **Factories**: one ``SystemFactory`` per system, found once from ``systems.<s>.samza.factory``; looking one
  up opens nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Self

from millstream.composition.metadata import metadata_store
from millstream.composition.systems import system_factory
from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.systems import SystemAdmin, SystemFactory
from millstream.errors import MillstreamError


class DriverServices:
    """The admins and metadata-store connections of one driver (see the module docstring); a context manager
    that closes them on leaving."""

    def __init__(self, config: Config, *, store: MetadataStore | None = None) -> None:
        self.config = Settings.of(config)
        self._lock = threading.Lock()
        self._factories: dict[str, SystemFactory] = {}
        self._admins: dict[tuple[int, str], SystemAdmin] = {}
        self._stores: dict[int, MetadataStore] = {}
        self._borrowed: dict[int, MetadataStore] = {}
        if store is not None:
            self._borrowed[threading.get_ident()] = store
        self._closed = False

    def factory(self, system: str) -> SystemFactory:
        """``system``'s factory (``systems.<s>.samza.factory``); a ``ConfigError`` names the key when it is
        missing or not a ``SystemFactory``."""
        with self._lock:
            factory = self._factories.get(system)
            if factory is None:
                factory = self._factories[system] = system_factory(self.config, system)
            return factory

    def admin(self, system: str) -> SystemAdmin:
        """``system``'s admin for the calling thread, started; the same object for the life of the services,
        stopped by ``close``."""
        factory = self.factory(system)
        key = (threading.get_ident(), system)
        with self._lock:
            self._refuse_closed(f"the admin of system '{system}'")
            admin = self._admins.get(key)
        if admin is None:  # started outside the lock: a slow broker must not hold up another thread's store
            admin = factory.get_admin(system, self.config)
            try:
                admin.start()
            except BaseException:
                admin.stop()
                raise
            with self._lock:
                self._admins[key] = admin
        return admin

    def store(self) -> MetadataStore:
        """The calling thread's metadata-store connection, opened on its first call; closed by ``close``."""
        ident = threading.get_ident()
        with self._lock:
            self._refuse_closed("a metadata-store connection")
            borrowed = self._borrowed.get(ident)
            if borrowed is not None:
                return borrowed
            opened = self._stores.get(ident)
            if opened is not None:
                return opened
        opened = metadata_store(self.config)
        opened.init()
        with self._lock:
            self._stores[ident] = opened
        return opened

    def new_store(self) -> MetadataStore:
        """A metadata-store connection, not yet opened, that its caller owns (opens, closes): for a thread that
        keeps its own connection for its whole life, as the driver's heartbeat does."""
        with self._lock:
            self._refuse_closed("a metadata-store connection")
        return metadata_store(self.config)

    def close(self) -> None:
        """Stop every admin and close every connection opened here; idempotent. The first error is raised
        after every resource was tried."""
        with self._lock:
            self._closed = True
            admins, self._admins = list(self._admins.values()), {}
            stores, self._stores = list(self._stores.values()), {}
        errors: list[BaseException] = []
        for release in (*(admin.stop for admin in admins), *(store.close for store in stores)):
            try:
                release()
            except Exception as error:  # the others are still released
                errors.append(error)
        if errors:
            raise errors[0]

    def _refuse_closed(self, what: str) -> None:
        if self._closed:
            raise MillstreamError(
                f"job '{self.config.get('job.name', 'millstream-job')}': the driver's services are "
                f"closed, so {what} cannot be opened"
            )

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@contextmanager
def driver_services(config: Config, services: DriverServices | None) -> Iterator[DriverServices]:
    """``services`` when a composition root passed them (left open: the root closes them), else services
    of this call alone, closed when it returns: the shape of the coordinator's functions that a user may call
    with a config only (``job_status(config)``)."""
    if services is not None:
        yield services
        return
    with DriverServices(config) as own:
        yield own


class ServiceScope:
    """A root's services when it holds them (between :meth:`hold` and :meth:`release`: ``with Job(...) as job``,
    one CLI command), else services of each call alone, closed when it returns, so that an object no one closes
    (a ``Job`` used call by call) holds no connection between calls."""

    def __init__(self, config: Config) -> None:
        self.config = Settings.of(config)
        self._held: DriverServices | None = None

    @property
    def held(self) -> DriverServices | None:
        return self._held

    def use(self) -> AbstractContextManager[DriverServices]:
        """The held services (left open), or services of this use alone (closed on leaving)."""
        return driver_services(self.config, self._held)

    def hold(self) -> DriverServices:
        """Services for every use until :meth:`release`; holding again returns the same ones."""
        if self._held is None:
            self._held = DriverServices(self.config)
        return self._held

    def release(self) -> None:
        """Close the held services (their admins and connections); idempotent."""
        held, self._held = self._held, None
        if held is not None:
            held.close()
