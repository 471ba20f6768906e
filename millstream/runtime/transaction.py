"""Exactly-once: one transaction per commit for all of a container's tasks.

Under ``task.processing.guarantee=exactly-once`` a container writes everything through one transactional
producer: its tasks' output, their changelog writes, the control messages they send to intermediate streams,
and their checkpoints. A transaction therefore holds what *every* task wrote since the last commit, and may
become visible only together with every task's checkpoint covering it. So a commit of one task is a commit
of all (as in Kafka Streams, where a stream thread commits all its tasks under ``exactly_once_v2``): each task
writes back and flushes its stores, snapshots them and appends its checkpoint to the open transaction, then
the transaction commits, and only then does each task do what must follow a durable checkpoint (delete
applied startpoints, purge intermediate streams, clean up old snapshots).

A failure anywhere before the transaction commits leaves nothing of it visible: the container fails, and the
next attempt (which aborts the transaction when it takes over the transactional id, if the brokers have not
already) restores every store to the last committed checkpoint and processes the input after it again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

log = logging.getLogger(__name__)


class TransactionalOutput(Protocol):
    """The producer pool as the transaction sees it."""

    def commit_transaction(self) -> None: ...


class CommittingTask(Protocol):
    def commit(self) -> None: ...


class ContainerTransaction:
    """Drives the container-wide commit; single-threaded (the run loop's thread)."""

    def __init__(self, output: TransactionalOutput) -> None:
        self.output = output
        self.tasks: Sequence[CommittingTask] = ()
        self.committing = False
        """Inside ``commit``: a task's ``commit`` does its own part instead of starting another round."""
        self.commits = 0
        self._after: list[Callable[[], None]] = []

    def after_commit(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the open transaction committed (never, when it does not)."""
        self._after.append(action)

    def commit(self) -> None:
        """Every task appends its checkpoint to the open transaction, the transaction commits, then each task's
        post-checkpoint actions run."""
        if self.committing:
            return
        self.committing = True
        try:
            for task in self.tasks:
                task.commit()
            self.output.commit_transaction()
            after, self._after = self._after, []
        except BaseException:
            self._after = []  # nothing of this transaction is durable: no action may follow it
            raise
        finally:
            self.committing = False
        self.commits += 1
        for action in after:
            action()
