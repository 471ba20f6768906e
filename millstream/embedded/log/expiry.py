"""Ending the embedded log's transactions on behalf of those they hold up: a reader held at a partition's stable
end, or the admin asked for its offsets, ends the transaction there once it is past its deadline.

``Reaper.settle`` looks at the transaction whose first batch is a partition's stable end. While it is open
before its deadline, nothing happens, and the deadline is remembered so that a reader polling an idle partition
asks the coordinator once per transaction, not once per poll. At or past it, the coordinator aborts it (one
write, against its writer's commit: ``transactions.TransactionLog.expire``) and the reaper discards its batches
in every partition it appended to, retiring its writer's attempt there in the same step, then forgets it. A
transaction that passed its commit point and is still unpublished at its deadline (its writer died while
publishing) is published instead. Both are idempotent, so several readers, the admin and the job's next attempt
may all do it at once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.storage import LogPartition
from millstream.embedded.log.transactions import Ending, TransactionLog, wall_clock_ms
from millstream.embedded.log.txn_protocol import NEVER, TxnState

log = logging.getLogger(__name__)


def end_transaction(layout: LogLayout, txn_log: TransactionLog, ending: Ending, *, fsync: bool = False) -> None:
    """Publish or discard ``ending`` in each of its partitions (a stream deleted since holds nothing), then
    forget it; for a caller that holds no partition open (the producer resolves through its own)."""
    for stream, partition in ending.members:
        if layout.read_info(stream) is None:
            continue
        partition_log = LogPartition(layout.partition_path(stream, partition), stream, partition, fsync=fsync)
        try:
            partition_log.resolve(ending.txn, commit=ending.commit, retire=ending.retire)
        finally:
            partition_log.close()
    txn_log.forget(ending.txn)


class Reaper:
    """Ends transactions past their deadline that hold a partition's stable end; thread-safe (one thread settles at
    a time): a container shares its admin between its threads (the lag gauges, restores, the adjunct loop)."""

    def __init__(
        self, system: str, layout: LogLayout, *, fsync: bool = False, clock: Callable[[], int] = wall_clock_ms
    ) -> None:
        self.system = system
        self.layout = layout
        self.fsync = fsync
        self.clock = clock
        self._txn_log: TransactionLog | None = None
        self._due: dict[tuple[str, int], tuple[int, int]] = {}
        """Per partition, the transaction last found at its stable end and when it is due."""
        self._lock = threading.RLock()

    def close(self) -> None:
        with self._lock:
            if self._txn_log is not None:
                self._txn_log.close()
                self._txn_log = None

    def settle(self, partition: LogPartition) -> bool:
        """End the transaction holding ``partition``'s stable end when it is past its deadline; True when one was
        ended (read again: the stable end moved)."""
        with self._lock:
            return self._settle(partition)

    def _settle(self, partition: LogPartition) -> bool:
        txn = partition.blocking_transaction()
        if txn is None:
            return False
        where = (partition.stream, partition.partition)
        due = self._due.get(where)
        if due is not None and due[0] == txn and self.clock() < due[1]:
            return False
        if self._txn_log is None:
            self._txn_log = TransactionLog(self.layout.root, self.system, fsync=self.fsync, clock=self.clock)
        record, retire = self._txn_log.expire(txn)
        if record is None:  # ended by its writer since the partition was read (or unknown): nothing to do
            self._due[where] = (txn, NEVER)
            return False
        if record.state is TxnState.OPEN or (record.state is TxnState.COMMITTED and self.clock() < record.deadline_ms):
            self._due[where] = (txn, record.deadline_ms)
            return False
        commit = record.state is TxnState.COMMITTED
        log.warning(
            "log system '%s': %s transaction %d of container %s (attempt %d of generation %d), which held %s "
            "partition %d past its deadline (transaction.timeout.ms)",
            self.system, "publishing committed" if commit else "aborted", txn, record.container, record.epoch,
            record.generation, partition.stream, partition.partition,
        )  # fmt: skip
        end_transaction(self.layout, self._txn_log, Ending(txn, commit, self._txn_log.members(txn), retire))
        self._due.pop(where, None)
        return True
