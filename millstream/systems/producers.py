"""The producers of a container: one started producer per system, shared by its tasks and stores."""

from __future__ import annotations

from dataclasses import replace
from typing import Self

from millstream.config import Config
from millstream.errors import MillstreamError
from millstream.systems.base import SystemProducer, WriterToken
from millstream.systems.registry import system_factory


class ProducerPool:
    """One started producer per system, created on first use and shared by the container's tasks."""

    def __enter__(self) -> Self:
        """Leaving flushes and stops every producer of the pool."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __init__(self, config: Config, writer: WriterToken | None = None) -> None:
        self.config = config
        self.writer = writer
        """A container's attempt: every producer of the pool writes on its behalf, so systems that fence
        writers refuse them once a newer attempt took over (see ``SystemProducer.set_writer``)."""
        self._producers: dict[str, SystemProducer] = {}

    def new_producer(self, system: str, *, pooled: bool = False) -> SystemProducer:
        """A started producer of ``system`` outside the pool (the caller stops it), writing as the pool's writer."""
        producer = system_factory(self.config, system).get_producer(system, self.config)
        if self.writer is not None:
            producer.set_writer(replace(self.writer, pooled=pooled))
        producer.start()
        return producer

    def producer(self, system: str) -> SystemProducer:
        producer = self._producers.get(system)
        if producer is None:
            producer = self.new_producer(system, pooled=True)
            self._producers[system] = producer
        return producer

    def flush(self, source: str) -> None:
        """Block until everything ``source`` sent is durable; raises the first failure."""
        for producer in self._producers.values():
            producer.flush(source)

    def stop(self) -> None:
        errors = []
        for system, producer in self._producers.items():
            try:
                producer.stop()
            except Exception as error:  # every producer must get its chance to stop
                errors.append(f"{system}: {error}")
        self._producers.clear()
        if errors:
            raise MillstreamError(f"producers failed to stop cleanly: {'; '.join(errors)}")
