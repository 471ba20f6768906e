"""The rules of the embedded log's transactions, without I/O: who may write, and what a container's next
attempt does with the transactions it finds (see ``transactions`` for the files they are applied to).

A transaction goes ``open`` → ``committed`` → resolved (its row deleted once every partition published it), or
``open`` → resolved by an abort (its batches discarded). ``committed`` is the commit point: it is set in the
coordinator file in the same SQLite transaction as the checkpoints it covers, and only while the writer is
still current. Everything after it (publishing the batches in each partition) is idempotent and may be done
by anyone: by the committing attempt, by its next attempt, or by any other container of the job that starts.

A transaction also has a deadline, ``transaction.timeout.ms`` after it began (Kafka's transaction timeout), so
that one whose writer never comes back does not hold readers at the stable end forever: at or past its deadline
an open transaction can no longer commit, and anyone may abort it (``expire``): a reader held at its first
record, the admin, the next attempt of any container of the job, or the writer's own late commit. The decision
is one state change in the coordinator file, so exactly one of "commit" and "timeout abort" wins; the abort
also retires the writer's attempt (records the attempt after it as the container's writer, as Kafka bumps the
producer epoch), so nothing it appends afterwards lands in a partition the abort cleaned. The time is an
input of these rules (``now_ms``, wall-clock milliseconds from the coordinator's injected clock).

A writer is current while no newer generation of its job and no newer attempt of its container has
registered (Kafka's ``transactional.id`` epoch): registering a newer one fences the older for good, so a
zombie (a paused attempt resumed after its replacement started) can neither commit nor add a partition to
its transaction. What the zombie had already appended is discarded by the replacement, which records itself
as the partition's writer in the same step, so nothing the zombie appends later lands there either.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from millstream.contracts.systems import WriterToken

Writer = tuple[str, int, int]
"""``(container, generation, epoch)`` as the coordinator records a job's writers."""


class TxnState(IntEnum):
    OPEN = 0
    COMMITTED = 1
    ABORTED = 2
    """Aborted by its timeout, its batches possibly not yet discarded everywhere."""


NEVER = 1 << 62
"""The deadline of a transaction without one (a coordinator file from before timeouts)."""


@dataclass(frozen=True)
class TxnRecord:
    """A transaction the coordinator still holds: open, or committed and not yet published everywhere."""

    txn: int
    container: str
    generation: int
    epoch: int
    state: TxnState
    deadline_ms: int = NEVER
    """When it times out: its begin plus the writer's ``transaction.timeout.ms``."""

    @property
    def writer(self) -> Writer:
        return (self.container, self.generation, self.epoch)


def expired(record: TxnRecord, now_ms: int) -> bool:
    """Whether ``record`` is open at or past its deadline: it may be aborted, and can no longer commit."""
    return record.state is TxnState.OPEN and now_ms >= record.deadline_ms


def commit_outcome(record: TxnRecord, now_ms: int) -> TxnState | None:
    """The state a commit request of ``record``'s (current) writer at ``now_ms`` leaves it in: ``COMMITTED``
    before its deadline, ``ABORTED`` at or past it; None (refused, nothing changes) when it is not open."""
    if record.state is not TxnState.OPEN:
        return None
    return TxnState.ABORTED if expired(record, now_ms) else TxnState.COMMITTED


def expiry_outcome(record: TxnRecord, now_ms: int) -> TxnState:
    """The state a timeout check at ``now_ms`` leaves ``record`` in: aborted when open and expired, else as is."""
    return TxnState.ABORTED if expired(record, now_ms) else record.state


def retired(writer: Writer) -> Writer:
    """The writer a timeout abort records for the aborted transaction's container: the attempt right after its
    writer's, which fences that attempt and no later one (every later attempt's ``(generation, epoch)`` is at
    least this)."""
    container, generation, epoch = writer
    return (container, generation, epoch + 1)


def fenced_by(recorded: Iterable[Writer], writer: WriterToken) -> str | None:
    """Why ``writer`` may no longer write, given the writers recorded for its job; None when it is current."""
    newest_generation = writer.generation
    own: tuple[int, int] | None = None
    for container, generation, epoch in recorded:
        newest_generation = max(newest_generation, generation)
        if container == writer.container_id:
            own = (generation, epoch)
    if newest_generation > writer.generation:
        return f"generation {newest_generation} of the job writes now"
    if own is not None and own > writer.order:
        return f"attempt {own[1]} of generation {own[0]} of the container writes now"
    return None


def recovery(records: Iterable[TxnRecord], writer: WriterToken, now_ms: int = 0) -> list[tuple[int, bool]]:
    """What a newly registered (current) ``writer`` does with its job's transactions: ``(txn, commit)`` pairs.

    Every committed one is published (rolled forward: its commit point passed, only publishing was cut
    short). An open one is aborted when its writer is fenced by ``writer``: an earlier attempt of the same
    container, or any container of an older generation; and any open one past its deadline at ``now_ms``, or
    already aborted by its timeout. Open transactions of the job's other current containers are theirs to end
    until they time out."""
    plan = []
    for record in records:
        if record.state is TxnState.COMMITTED:
            plan.append((record.txn, True))
        elif _abortable(record, writer, now_ms):
            plan.append((record.txn, False))
    return plan


def _abortable(record: TxnRecord, writer: WriterToken, now_ms: int) -> bool:
    """An open or timed-out transaction ``writer`` aborts: its writer is fenced by ``writer`` (an earlier attempt of
    its container, or an older generation), or it is past its deadline."""
    if record.state is TxnState.ABORTED or expired(record, now_ms):
        return True
    return record.generation < writer.generation or (
        record.container == writer.container_id and (record.generation, record.epoch) < writer.order
    )
