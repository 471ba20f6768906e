"""The rules of the embedded log's transactions, without I/O: who may write, and what a container's next
attempt does with the transactions it finds (see ``transactions`` for the files they are applied to).

A transaction goes ``open`` → ``committed`` → resolved (its row deleted once every partition published it), or
``open`` → resolved by an abort (its batches discarded). ``committed`` is the commit point: it is set in the
coordinator file in the same SQLite transaction as the checkpoints it covers, and only while the writer is
still current. Everything after it (publishing the batches in each partition) is idempotent and may be done
by anyone: by the committing attempt, by its next attempt, or by any other container of the job that starts.

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

from millstream.systems.base import WriterToken

Writer = tuple[str, int, int]
"""``(container, generation, epoch)`` as the coordinator records a job's writers."""


class TxnState(IntEnum):
    OPEN = 0
    COMMITTED = 1


@dataclass(frozen=True)
class TxnRecord:
    """A transaction the coordinator still holds: open, or committed and not yet published everywhere."""

    txn: int
    container: str
    generation: int
    epoch: int
    state: TxnState


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


def recovery(records: Iterable[TxnRecord], writer: WriterToken) -> list[tuple[int, bool]]:
    """What a newly registered (current) ``writer`` does with its job's transactions: ``(txn, commit)`` pairs.

    Every committed one is published (rolled forward: its commit point passed, only publishing was cut
    short). An open one is aborted when its writer is fenced by ``writer``: an earlier attempt of the same
    container, or any container of an older generation. Open transactions of the job's other current
    containers are theirs to end."""
    plan = []
    for record in records:
        if record.state is TxnState.COMMITTED:
            plan.append((record.txn, True))
        elif record.generation < writer.generation or (
            record.container == writer.container_id and (record.generation, record.epoch) < writer.order
        ):
            plan.append((record.txn, False))
    return plan
