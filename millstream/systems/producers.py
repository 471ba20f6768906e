"""The producers of a container: per system, one started producer for output and one for state, shared
by its tasks and stores.

Output and state (changelog) writes go through different producers under at-least-once, so that output is
visible as soon as it is written while changelog writes stay fenced: a Kafka system writes changelogs in
transactions under the container's ``transactional.id`` (a newer attempt aborts and fences a zombie's, so
nothing it writes lands behind the offsets a restore reads) and output with an idempotent producer, whose
records consumers see at once. Under exactly-once both are one transactional producer (Kafka's, or the
embedded log's), whose transaction a commit ends together with the checkpoints, so output, changelog writes
and checkpoints become visible together or not at all.

Under at-least-once a container's state producer is used from several threads: the container's (a store writing
back what its cache evicts), and each task's commit thread (a commit made beside processing writes back its cut
and flushes there). A transactional producer takes one call at a time (librdkafka refuses a send while a
commit of the transaction is in progress with "Erroneous state", and a flush that found another thread's flush
covering its sends would return before they are durable), so the pool hands it out behind a lock
(``SerializedProducer``). A call waits at most for the one in progress, which is bounded by the system's own
timeouts (``systems.<s>.outage.timeout.ms`` for a Kafka flush); and where one flush covers every source's sends
(``SystemProducer.flush_covers_every_source``: Kafka's), a flush also waits for the sends that were already waiting
when it was asked.

That last rule is a group commit. A flush of a transactional producer commits the transaction, and while it runs
the other commit threads queue up behind the lock, each to send its task's changelog writes or to flush. Taken in
whatever order the lock hands them out, the queue's next flush covers only the sends that happened to come before
it, and each of the rest needs a commit of its own: measured on Kafka, 0.8 transactions per task. Letting the
waiting sends go first makes the next flush cover them all, and their tasks' own flushes then find their sends
covered and return at once: 6 transactions for a round of 100 tasks, 37 for 1,000. Each transaction costs
requests to the brokers, and librdkafka walks every partition the producer writes to on each of them: the round's
CPU fell by more than half (see the performance page). A flush waits only for sends already waiting when it was
asked, never for later ones, so steady sending cannot hold it off. The embedded log's producer flushes only the
source's own partitions, so there no flush waits for the others' sends.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Self

from millstream.config.settings import Settings
from millstream.contracts.systems import SystemFactory, SystemProducer, SystemStreamPartitionMetadata, WriterToken
from millstream.errors import ConfigError, MillstreamError
from millstream.model import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition


class ProducerPool:
    """Per system, a started output producer and a state producer, created on first use and shared by the
    container's tasks; one and the same producer under exactly-once."""

    def __enter__(self) -> Self:
        """Leaving flushes and stops every producer of the pool."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __init__(self, config: Settings, writer: WriterToken | None, factory: Callable[[str], SystemFactory]) -> None:
        self.config = config
        self.factory = factory
        """The factory of a system: the container's services build each once (a pool never looks one up)."""
        self.writer = writer
        """A container's attempt: every producer of the pool writes on its behalf, so systems that fence
        writers refuse them once a newer attempt took over (see ``SystemProducer.set_writer``)."""
        self.exactly_once = config.task.exactly_once
        self._output: dict[str, SystemProducer] = {}
        self._state: dict[str, SystemProducer] = {}

    def new_producer(self, system: str, *, pooled: bool = False, start: bool = True) -> SystemProducer:
        """A producer of ``system`` outside the pool (the caller stops it), writing as the pool's writer, started
        unless ``start`` is False (its user starts it); ``pooled``: it holds the container's transactional id
        (see ``WriterToken.pooled``)."""
        producer = self.factory(system).get_producer(system, self.config)
        if self.writer is not None:
            producer.set_writer(replace(self.writer, pooled=pooled))
        if start:
            producer.start()
        return producer

    @property
    def started(self) -> bool:
        """Whether the pool holds a producer."""
        return bool(self._output or self._state)

    def producer(self, system: str) -> SystemProducer:
        """The output producer: tasks' output, control messages, dead letters."""
        if self.exactly_once:
            return self.state_producer(system)
        producer = self._output.get(system)
        if producer is None:
            producer = self._output[system] = self.new_producer(system)
        return producer

    def state_producer(self, system: str) -> SystemProducer:
        """The producer of changelog writes; it holds the container's transactional id, so starting it fences
        the container's earlier attempts. Under exactly-once, every write of the container goes through it, so
        it must write in transactions, and through one system only (one transaction per commit)."""
        producer = self._state.get(system)
        if producer is None:
            if self.exactly_once and self._state:
                raise ConfigError(
                    self._not_exactly_once(system, f"the container already writes to '{next(iter(self._state))}'")
                )
            producer = self.new_producer(system, pooled=True)
            if self.exactly_once and not producer.transactional:
                producer.stop()
                raise ConfigError(self._not_exactly_once(system, "its producer cannot write in transactions"))
            producer = self._state[system] = producer if self.exactly_once else SerializedProducer(producer)
        return producer

    @staticmethod
    def _not_exactly_once(system: str, why: str) -> str:
        return (
            f"task.processing.guarantee=exactly-once: cannot write to system '{system}': {why}; under exactly-once "
            "every output, changelog and the checkpoints go through one system with transactional writes (Kafka or "
            "the embedded log), committed together"
        )

    def commit_transaction(self) -> None:
        """Under exactly-once, end the container's transaction: everything written since the last commit, the
        checkpoints included, becomes visible at once. A no-op under at-least-once."""
        for _, producer in self._all():
            producer.commit_transaction()

    def _all(self) -> list[tuple[str, SystemProducer]]:
        return [*self._state.items(), *self._output.items()]

    def flush(self, source: str) -> None:
        """Block until everything ``source`` sent is durable (and, in transactions, committed); raises the
        first failure. State first, so a zombie meets its fence at the changelog; either order is safe, since
        the checkpoint that covers these writes is written only after both, and a restore reverts changelog
        records past the last checkpoint."""
        for _, producer in self._all():
            producer.flush(source)

    def send_lingering(self, drained: bool = False) -> float | None:
        """Send what output producers hold back for batching and has waited long enough (all of it when
        ``drained``: no input is waiting); returns the seconds until the next such deadline, None when nothing
        is held back."""
        deadlines = [d for _, p in self._all() if (d := p.send_lingering(drained)) is not None]
        return min(deadlines) if deadlines else None

    def stop(self) -> None:
        errors = []
        for system, producer in self._all():
            try:
                producer.stop()
            except Exception as error:  # every producer must get its chance to stop
                errors.append(f"{system}: {error}")
        self._output.clear()
        self._state.clear()
        if errors:
            raise MillstreamError(f"producers failed to stop cleanly: {'; '.join(errors)}")


class SerializedProducer(SystemProducer):
    """A started producer whose calls run one at a time, whatever thread makes them (see the module docstring).

    Under exactly-once the pool hands out the producer itself: every call comes from the container's thread."""

    def __init__(self, producer: SystemProducer) -> None:
        self.producer = producer
        self._lock = threading.RLock()
        self._groups_flushes = producer.flush_covers_every_source
        """Whether a flush waits for the sends already waiting (see the module docstring): only where one flush
        covers every source's sends; a producer that flushes per source (the embedded log's) gains nothing."""
        self._turns = threading.Condition(self._lock)
        """Where a flush waits for the sends that were waiting when it was asked."""
        self._queue = threading.Lock()
        self._sends_asked = 0
        """Sends that began to wait for the lock; changed under ``_queue``, not the lock they wait for."""
        self._sends_done = 0
        """Sends that had their turn, whether they succeeded or raised; changed under the lock."""

    def register(self, source: str) -> None:
        with self._lock:
            self.producer.register(source)

    def claim(self, ssp: SystemStreamPartition) -> None:
        with self._lock:
            self.producer.claim(ssp)

    def describe(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        with self._lock:
            return self.producer.describe(ssps)

    def written_offsets(self, ssps: Iterable[SystemStreamPartition]) -> dict[SystemStreamPartition, str]:
        with self._lock:
            return self.producer.written_offsets(ssps)

    def start(self) -> None:
        with self._lock:
            self.producer.start()

    def _sending(self) -> contextlib.AbstractContextManager[object]:
        """A send's turn: counted, from when it began to wait until it is done, where flushes are grouped."""
        return self._counted_send() if self._groups_flushes else self._lock

    @contextlib.contextmanager
    def _counted_send(self) -> Iterator[None]:
        with self._queue:
            self._sends_asked += 1
        with self._turns:
            try:
                yield
            finally:
                self._sends_done += 1
                self._turns.notify_all()

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        with self._sending():
            self.producer.send(source, envelope)

    def send_batch(
        self, source: str, stream: SystemStream, messages: Sequence[bytes | None], keys: Sequence[bytes | None] | None
    ) -> None:
        with self._sending():
            self.producer.send_batch(source, stream, messages, keys)

    def flush(self, source: str) -> None:
        """Flush once the sends already waiting for the lock are done, so that this flush covers them too."""
        with self._turns:
            if self._groups_flushes:
                with self._queue:
                    due = self._sends_asked
                self._turns.wait_for(lambda: self._sends_done >= due)
            self.producer.flush(source)

    @property
    def transactional(self) -> bool:
        return self.producer.transactional

    def commit_transaction(self) -> None:
        with self._lock:
            self.producer.commit_transaction()

    def send_lingering(self, drained: bool = False) -> float | None:
        with self._lock:
            return self.producer.send_lingering(drained)

    def stop(self) -> None:
        with self._lock:
            self.producer.stop()
