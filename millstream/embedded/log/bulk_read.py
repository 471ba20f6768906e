"""Bulk reads of one log partition between two offsets: what a changelog restore replays.

A replay needs each record's key and value bytes and nothing else, so the stored batches' columns are
handed over as they are unpacked (``RecordBatch``), with no envelope, offset string or header per record: in
Python the per-record work is what bounds a replay, and this leaves only what the caller does with each
key and value. The read goes through the same ``LogPartition.read`` as a consumer's poll (one SELECT per
batch, payload checksums verified), so it sees exactly what a consumer would: nothing past the stable end,
nothing below ``oldest``, and an aborted transaction's offsets stepped over.
"""

from __future__ import annotations

from collections.abc import Generator

from millstream.contracts.systems import RecordBatch
from millstream.embedded.log.errors import LogOffsetOutOfRangeError
from millstream.embedded.log.storage import LogPartition


def read_range(partition: LogPartition, start: int, end: int, batch_size: int) -> Generator[RecordBatch, None, None]:
    """The records of ``partition`` from offset ``start`` through ``end`` (inclusive), at most ``batch_size`` a
    batch; see ``BulkReadingSystemConsumer.read_range`` for the contract.

    Stops before ``end`` only where a consumer's poll would wait: at the stable end (an open transaction's
    records), having yielded where it stopped. A gap of an aborted transaction is stepped over, and an empty
    batch says so when nothing else does. Raises ``LogOffsetOutOfRangeError`` when ``start`` (or, trimmed
    meanwhile, a later position) is below the oldest retained offset."""
    position = start
    while position <= end:
        records = partition.read(position, min(batch_size, end + 1 - position))
        if records is None:
            state = partition.state()
            if position < state.oldest:
                raise LogOffsetOutOfRangeError(
                    partition.stream, partition.partition, position, state.oldest, state.upcoming
                )
            moved = partition.readable_from(position)
            if moved <= position:
                return  # the stable end: the caller goes on by polling, which waits for it
            position = moved
            yield RecordBatch(None, (), str(position), 0)
            continue
        values = records.values
        take = min(len(values), end + 1 - records.start)
        if take <= 0:  # a gap ran past ``end``: the next record is beyond the range
            yield RecordBatch(None, (), str(records.start), 0)
            return
        keys = records.keys
        if take < len(values):
            values = values[:take]
            keys = None if keys is None else keys[:take]
        position = records.start + take
        yield RecordBatch(keys, values, str(position), _size(values))


def _size(values: list[bytes | None]) -> int:
    """Bytes of the values (a tombstone counts none), in C unless a tombstone makes ``len`` refuse."""
    try:
        return sum(map(len, values))  # type: ignore[arg-type]  # None raises, handled below
    except TypeError:
        return sum(len(value) for value in values if value is not None)
