"""Writes envelopes to log streams, buffered per partition and appended in batches.

A partition's buffer is appended (one transaction, one stored batch) when it reaches
``systems.<s>.producer.batch.size`` records, when its oldest record waited ``producer.linger.ms``
(``send_lingering``, which a container's run loop calls between batches, so output is readable within
milliseconds rather than at the next commit), and on ``flush``, by the sending thread itself. A background
appender thread was measured to cost more than it saved: each SQLite statement gives up the GIL, and the
appender then waited for the busy sender to hand it back, up to a switch interval each time, so the
sender ended up waiting for the appender's queue. A failed append keeps its records (and every record
sent after it) buffered for the next ``flush``, so the error surfaces there instead of the records
vanishing.

``flush(source)`` appends only the buffers of the partitions ``source`` sent to since its last flush (each
source keeps the set of buffer slots it touched), so a task's commit costs appends for what that task wrote,
not for what every task of the container buffered: with ``n`` tasks committing in turn, flushing everything
made each append hold about one task's records and cost ``n`` times the appends. A buffer holds every
source's records for its partition, so a flush also appends other sources' records that share a touched
buffer; that is correct, and keeps each partition's records in send order. The producer also keeps the set of
slots whose buffers hold records, so whether anything is left to linger after a flush, and what a flush of
everything appends, cost what is buffered, not a look at each partition's buffer.

A container's producer writes on behalf of a ``WriterToken`` (``set_writer``): every append checks it
in the append's transaction (see ``storage``), and once one is refused the producer is fenced for good —
every later ``send`` and ``flush`` raises the same ``WriterFencedError`` and nothing more is appended,
so a zombie attempt stops at its next write.

Exactly-once (``transactional``: the container's pooled producer under ``task.processing.guarantee=
exactly-once``): every append belongs to the container's open transaction of the log (``transactions``),
so readers see none of it, and ``flush`` does not make anything visible; ``stage_checkpoint`` keeps the
tasks' checkpoints for the commit, and ``commit_transaction`` appends what is buffered, commits the
transaction with the checkpoints in the coordinator file (the commit point) and then publishes it in every
partition it appended to. ``start`` registers the container's attempt, which fences its earlier attempts,
and ends what they left: committed transactions are published, open ones discarded. ``stop`` discards
the open transaction. A transaction open past ``transaction.timeout.ms`` is aborted by whoever finds it
(``expiry``), and the producer's commit, or its next write, then fails with ``TransactionTimedOutError``
naming the transaction and the container: nothing of it is visible, and the next attempt restores from the
last committed checkpoint. Records wait in their buffers for the commit instead of ``linger.ms``: nothing
would be visible earlier anyway, and fuller batches are cheaper.

A producer keeps at most ``open_max`` partition files open (``systems.<s>.producer.open.partitions.max``), the
least recently appended to closed first and reopened by the next append to it (``_partition``); a reopened
file must be the one first opened, so a stream deleted or re-created under the producer fails its append as
it does with the file held open. Nothing a producer guarantees lives in an open file: a partition's records
wait in its buffer, in send order, whether its file is open or not; the writer check runs in each append's
own transaction against the file (a reopened file checks it in full once); and a transaction's batches are
in the files, so its partitions need not stay open until its commit, which reopens the ones it publishes in.
The bound therefore holds however many partitions a transaction writes. Closing costs only the fast path of
the next append (where the file ends, which it then reads).

A buffer is one flat list, ``timestamp, key, value, headers`` after one another for each record:
extending it costs a send less than appending a tuple, and its columns come out for the append as
four strided slices instead of a ``zip`` over every record.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice, repeat
from typing import Any, cast

from millstream.contracts.systems import (
    SystemProducer,
    SystemStreamPartitionMetadata,
    WriterFencedError,
    WriterToken,
    all_bytes_or_none,
    all_none,
)
from millstream.embedded.log.errors import LogSystemError, TransactionTimedOutError
from millstream.embedded.log.expiry import end_transaction
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.metadata import partition_metadata
from millstream.embedded.log.open_files import pool_bounds
from millstream.embedded.log.partitioner import Partitioner, round_robin
from millstream.embedded.log.storage import LogPartition
from millstream.embedded.log.transactions import Ending, Member, TransactionLog, wall_clock_ms
from millstream.embedded.log.txn_protocol import NEVER
from millstream.errors import StreamNotFoundError
from millstream.model import OutgoingMessageEnvelope, SystemStream, SystemStreamPartition

log = logging.getLogger(__name__)

_BYTES_LIKE = (bytes, bytearray, memoryview)
_FIELDS = 4
"""Entries per record in a buffer: timestamp, key, value, headers."""
_time_ns = time.time_ns
_monotonic = time.monotonic
_crc32 = zlib.crc32


@dataclass(slots=True)
class _StreamWriter:
    stream: str
    partition_count: int
    buffers: list[list[Any]]
    round_robin: Iterator[int]
    """Partitions for keyless envelopes, from a random one on (see ``partitioner``)."""
    base: int = 0
    """The producer-wide slot of partition 0's buffer; partition ``p``'s is ``base + p`` (see ``_touched``)."""
    owners: list[str | None] = field(default_factory=list)
    """Per partition, the source that last recorded its buffer as touched, None once the buffer was appended:
    while a source is the owner, the buffer is in its touched set, so ``send`` skips the set (an identity test
    instead of a set insertion per record)."""
    identities: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    """Per partition opened, the file first opened (``LogPartition.identity``): a reopened one must be it."""


class LogSystemProducer(SystemProducer):
    """``SystemProducer`` of the embedded log; thread-safe.

    Within a partition, records are appended in the order they were sent. ``flush`` returns once
    every record sent before it is committed (see ``storage`` for what survives a crash) and raises
    a ``LogSystemError`` naming the stream and partition when an append failed — for instance
    because the partition is sealed. A missing stream is an error unless
    ``systems.<s>.auto.create.streams`` is true.
    """

    def __init__(
        self,
        system: str,
        layout: LogLayout,
        *,
        batch_size: int = 1000,
        linger_ms: int = 5,
        linger_when_drained: bool = False,
        fsync: bool = False,
        auto_create_streams: bool = False,
        default_partitions: int = 1,
        transactional: bool = False,
        transaction_timeout_ms: int = NEVER,
        clock: Callable[[], int] = wall_clock_ms,
        open_max: int | None = None,
    ) -> None:
        if open_max is None:  # the factory's default: one source of it (``open_files``)
            open_max = pool_bounds(None, None, None).producer
        if open_max < 1:
            raise ValueError(f"open_max must be >= 1, got {open_max}")
        self.system = system
        self.open_max = open_max
        self._open: OrderedDict[tuple[str, int], LogPartition] = OrderedDict()
        """The open partition files, least recently appended to first."""
        self.layout = layout
        self.batch_size = batch_size
        self._linger = linger_ms / 1000
        self._linger_when_drained = linger_when_drained
        """``producer.linger.when.drained``: records wait all of ``linger.ms`` even when no input is waiting."""
        self._held_since: float | None = None
        """When the oldest record still buffered was sent (monotonic seconds); None: nothing is buffered."""
        self._fsync = fsync
        self._auto_create = auto_create_streams
        self._default_partitions = default_partitions
        self._writers: dict[str, _StreamWriter] = {}
        self._partitioner = Partitioner()
        self._lock = threading.Lock()
        self._writer: WriterToken | None = None
        self._fenced: WriterFencedError | None = None
        self._failure: BaseException | None = None
        """Why an append of a full buffer failed since the last ``flush``: until then nothing more is appended."""
        self._exactly_once = transactional
        self._txn_timeout_ms = transaction_timeout_ms
        self._clock = clock
        """Wall-clock milliseconds for the coordinator: transactions' deadlines."""
        self._txn_log: TransactionLog | None = None
        """Exactly-once: the coordinator file, once ``start`` registered the writer."""
        self._txn: int | None = None
        """The open transaction, begun at the first append (or checkpoint) after a commit."""
        self._members: set[Member] = set()
        """The partitions the open transaction appended to."""
        self._checkpoints: dict[tuple[str, int], bytes] = {}
        """``(task, version)`` → the serialized checkpoint the next commit stores."""
        self._slots: list[tuple[_StreamWriter, int]] = []
        """Per buffer slot, its writer and partition."""
        self._appended: dict[tuple[str, int], int] = {}
        """Per ``(stream, partition)``, the offset of the newest record this producer appended (``written_offsets``)."""
        self._touched: dict[str, set[int]] = {}
        """Per source, the slots of the buffers it sent to since its last ``flush``: what that flush appends."""
        self._buffered: set[int] = set()
        """The slots whose buffers hold records: each one a send touched since its buffer was last appended or
        dropped. What ``_flush_all`` appends, and whether anything is left to linger after a flush, then cost what
        is buffered instead of a look at every partition the producer writes to: with a changelog partition per
        task, that look made each task's flush cost in proportion to the container's tasks."""
        self._last: tuple[str | None, SystemStream | None, _StreamWriter, set[int]] = (
            None, None, cast(_StreamWriter, None), set(),
        )  # fmt: skip
        """The source and stream sent to last, the stream's writer and the source's touched slots, as one
        reference (see ``_stream_writer``)."""

    @property
    def open_partitions(self) -> int:
        """How many partition files the producer holds open now (at most ``open_max``)."""
        return len(self._open)

    @property
    def batch_size(self) -> int:
        """Records a partition's buffer holds before it is appended."""
        return self._fill // _FIELDS

    @batch_size.setter
    def batch_size(self, value: int) -> None:
        self._fill = value * _FIELDS

    @property
    def transactional(self) -> bool:
        """Exactly-once: this producer holds the container's transaction (see the module docstring)."""
        return self._exactly_once and self._writer is not None and self._writer.pooled

    def start(self) -> None:
        """Exactly-once: register the writer (fencing its earlier attempts) and end what they left."""
        if not self.transactional or self._txn_log is not None:
            return
        writer = cast(WriterToken, self._writer)
        txn_log = TransactionLog(self.layout.root, self.system, fsync=self._fsync, clock=self._clock)
        try:
            plan = txn_log.register(writer)
            for txn, commit, members, retire in plan:
                log.info("log system '%s': %s transaction %d left by an earlier writer of job %s",
                         self.system, "publishing" if commit else "aborting", txn, writer.job)  # fmt: skip
                self._resolve(txn, commit, members, retire)
                txn_log.forget(txn)
        except BaseException:
            txn_log.close()
            raise
        self._txn_log = txn_log

    def _resolve(self, txn: int, commit: bool, members: list[Member], retire: WriterToken | None = None) -> None:
        """Publish or discard ``txn`` in each of its partitions (a stream deleted since holds nothing); ``retire``:
        see ``LogPartition.resolve``."""
        for stream, partition in members:
            writer = self._writers.get(stream)
            if writer is None:
                if self.layout.read_info(stream) is None:
                    continue
                writer = self._open_stream(stream)
            self._partition(writer, partition).resolve(txn, commit=commit, writer=self._writer, retire=retire)

    def stage_checkpoint(self, task: str, version: int, value: bytes) -> None:
        """Exactly-once: store ``value`` as ``task``'s checkpoint of ``version`` when the open transaction
        commits, not before."""
        with self._lock:
            self._raise_if_fenced()
            self._checkpoints[(task, version)] = value

    def commit_transaction(self) -> None:
        """Exactly-once: append what is buffered to the open transaction, commit it with the staged checkpoints
        (the commit point), then publish it in every partition it appended to; raises ``WriterFencedError``,
        with nothing committed, once a newer attempt registered. A no-op under at-least-once."""
        txn_log = self._txn_log
        if txn_log is None:
            return
        with self._lock:
            self._raise_if_fenced()
            self._flush_all()
            if self._txn is None and not self._checkpoints:
                return
            writer = cast(WriterToken, self._writer)
            try:
                txn = self._txn if self._txn is not None else txn_log.begin(writer, timeout_ms=self._txn_timeout_ms)
                txn_log.commit(txn, writer, self._checkpoints)
            except TransactionTimedOutError as timed_out:
                self._fenced = timed_out
                self._timed_out(timed_out)
                raise
            except WriterFencedError as fenced:
                self._fenced = fenced
                raise
            members = sorted(self._members)
            self._txn, self._members, self._checkpoints = None, set(), {}
            self._resolve(txn, True, members)
            txn_log.forget(txn)

    def _timed_out(self, error: TransactionTimedOutError) -> None:
        """The open transaction was aborted by its timeout: discard what it appended (whoever aborted it may not
        have yet), retiring this attempt in each partition, and drop what is buffered and staged."""
        txn_log = cast(TransactionLog, self._txn_log)
        self._txn, self._members, self._checkpoints = None, set(), {}
        self._appended.clear()
        self._drop_buffered()
        record, retire = txn_log.expire(error.txn)
        if record is not None:  # else whoever aborted it ended it everywhere already
            ending = Ending(error.txn, False, txn_log.members(error.txn), retire)
            end_transaction(self.layout, txn_log, ending, fsync=self._fsync)

    def _explained(self, fenced: WriterFencedError) -> WriterFencedError:
        """``fenced`` as ``TransactionTimedOutError`` when what fenced this attempt was its transaction's timeout."""
        if self._txn_log is None or self._writer is None or isinstance(fenced, TransactionTimedOutError):
            return fenced
        txn = self._txn_log.timed_out(self._writer)
        if txn is None:
            return fenced
        return TransactionTimedOutError(self.system, txn, self._writer, self._txn_log.path)

    def _abort(self) -> None:
        """Discard the open transaction and what is buffered for it (stopping without a commit). Refused in a
        partition once this attempt is fenced or its transaction timed out: whoever did that ends it there."""
        txn_log = cast(TransactionLog, self._txn_log)
        self._appended.clear()
        self._drop_buffered()
        if self._txn is not None and self._fenced is None:
            txn, members = self._txn, sorted(self._members)
            self._txn, self._members, self._checkpoints = None, set(), {}
            try:
                self._resolve(txn, False, members)
            except WriterFencedError as fenced:
                self._fenced = self._explained(fenced)
                return
            txn_log.forget(txn)

    def written_offsets(self, ssps: Iterable[SystemStreamPartition]) -> dict[SystemStreamPartition, str]:
        """The newest offset each append to ``ssps`` returned (an open transaction's records included). Forgotten
        when a transaction is discarded: what it appended is then no position of the partition's records."""
        with self._lock:
            appended = self._appended
            return {
                ssp: str(appended[key])
                for ssp in ssps
                if ssp.system == self.system and (key := (ssp.stream, ssp.partition)) in appended
            }

    def describe(
        self, ssps: Iterable[SystemStreamPartition]
    ) -> dict[SystemStreamPartition, SystemStreamPartitionMetadata]:
        """The offsets of the partitions among ``ssps`` whose files this producer holds open (a claimed changelog
        partition), read through its own connection as the admin reads them. A partition it does not hold, whose
        file was replaced, or with a transaction still open (which the admin ends first when it is past its
        deadline) is left out for the admin."""
        result = {}
        with self._lock:
            for ssp in ssps:
                log = self._open.get((ssp.stream, ssp.partition)) if ssp.system == self.system else None
                if log is None or not log.is_current():
                    continue
                state = log.state()
                if state.settled:
                    result[ssp] = partition_metadata(state)
        return result

    def set_writer(self, writer: WriterToken) -> None:
        self._writer = writer

    def claim(self, ssp: SystemStreamPartition) -> None:
        """Record this producer's writer on ``ssp`` now; without a writer there is nothing to fence."""
        if self._writer is None:
            return
        with self._lock:
            self._raise_if_fenced()
            writer = self._writers.get(ssp.stream) or self._open_stream(ssp.stream)
            try:
                self._partition(writer, ssp.partition).claim(self._writer)
            except WriterFencedError as fenced:
                self._fenced = fenced
                raise

    def _raise_if_fenced(self) -> None:
        if self._fenced is not None:
            raise self._fenced

    def stop(self) -> None:
        """Flush everything, then close the partition files (even when the flush fails). A fenced
        producer drops what it buffered: a zombie's records are never written."""
        with self._lock:
            try:
                if self._txn_log is not None:
                    try:
                        self._abort()
                    finally:
                        self._txn_log.close()
                        self._txn_log = None
                elif self._fenced is None:
                    self._flush_all()
            finally:
                opened, self._open = self._open, OrderedDict()
                for partition in opened.values():
                    partition.close()

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        system_stream = envelope.system_stream
        key = envelope.key
        message = envelope.message
        timestamp = envelope.timestamp
        headers = envelope.headers
        # The common case (bytes or None, no timestamp or an int one, no headers, the stream sent to
        # last) costs a few identity tests; anything else is checked and converted out of line.
        if (key is not None and key.__class__ is not bytes) or (message.__class__ is not bytes and message is not None):
            self._check(*system_stream, key, message)
        if timestamp is None:
            timestamp = _time_ns() // 1_000_000
        elif timestamp.__class__ is not int:
            timestamp = int(timestamp)
        if headers is not None:
            headers = _check_headers(system_stream[1], headers) if headers else None
        lock = self._lock
        lock.acquire()  # twice as fast as ``with lock`` in CPython 3.11
        try:
            if self._fenced is not None:
                raise self._fenced
            last_source, last_stream, writer, touched = self._last
            if system_stream is not last_stream or source is not last_source:
                writer, touched = self._stream_writer(source, system_stream)
            partition = envelope.partition
            if partition is None:
                by = envelope.partition_key
                if by is None:
                    by = key
                if by is None:
                    partition = next(writer.round_robin)
                elif by.__class__ is bytes:
                    partition = _crc32(by) % writer.partition_count
                else:
                    partition = self._partitioner.partition(envelope, writer.partition_count)
            elif partition.__class__ is not int or not 0 <= partition < writer.partition_count:
                partition = self._partitioner.partition(envelope, writer.partition_count)
            buffer = writer.buffers[partition]
            buffer += (timestamp, key, message, headers)
            owners = writer.owners
            if owners[partition] is not source:  # always so for an empty buffer: ``_append`` reset its owner
                owners[partition] = source
                slot = writer.base + partition
                touched.add(slot)
                self._buffered.add(slot)
            if self._held_since is None:
                self._held_since = _monotonic()
            if len(buffer) >= self._fill:
                self._hand_over(writer, partition)
        finally:
            lock.release()

    def send_batch(
        self, source: str, stream: SystemStream, messages: Sequence[bytes | None], keys: Sequence[bytes | None] | None
    ) -> None:
        """``send``'s common case once per batch, with one timestamp (the batch's send time) and one lock
        hold: each record goes to the partition ``send`` would choose, in order. Keyless records are dealt
        round the partitions by slicing (``messages[i::count]``), so a keyless batch costs a few C-level
        copies per partition instead of Python work per record; keyed records are appended one by one.
        A batch with anything that is not bytes goes message by message, so ``send`` names it."""
        if keys is not None and all_none(keys):
            keys = None
        if not all_bytes_or_none(messages) or (keys is not None and not all_bytes_or_none(keys)):
            super().send_batch(source, stream, messages, keys)
            return
        timestamp = _time_ns() // 1_000_000
        lock = self._lock
        lock.acquire()
        try:
            if self._fenced is not None:
                raise self._fenced
            last_source, last_stream, writer, touched = self._last
            if stream is not last_stream or source is not last_source:
                writer, touched = self._stream_writer(source, stream)
            if self._held_since is None and messages:
                self._held_since = _monotonic()
            if keys is None:
                self._deal(writer, messages, timestamp, touched)
                return
            partitions = _partitions_of(writer, keys)
            base = writer.base
            slots = {base + partition for partition in set(partitions)}
            touched |= slots
            buffers, fill = writer.buffers, self._fill
            for partition, key, message in zip(partitions, keys, messages, strict=False):
                buffer = buffers[partition]
                buffer += (timestamp, key, message, None)
                if len(buffer) >= fill:
                    self._hand_over(writer, partition)
            self._buffered.update(slot for slot in slots if buffers[slot - base])  # after the hand-overs emptied some
        finally:
            lock.release()

    def _deal(self, writer: _StreamWriter, messages: Sequence[bytes | None], timestamp: int, touched: set[int]) -> None:
        """Append keyless ``messages`` round robin, as ``send`` would one by one: the ``i``-th goes to the
        ``i``-th partition of the round from where it stands, so partition ``first + j`` gets
        ``messages[j::count]`` and the round goes on after the last. Under the lock."""
        sent = len(messages)
        if not sent:
            return
        if not isinstance(messages, list):
            messages = list(messages)
        count = writer.partition_count
        first = next(writer.round_robin)
        if skip := (sent - 1) % count:  # the round goes on after the batch's last record
            next(islice(writer.round_robin, skip - 1, None))
        for step in range(min(count, sent)):
            partition = (first + step) % count
            dealt = messages[step::count]
            records: list[Any] = [None] * (_FIELDS * len(dealt))
            records[0::_FIELDS] = repeat(timestamp, len(dealt))
            records[2::_FIELDS] = dealt
            buffer = writer.buffers[partition]
            buffer += records
            touched.add(writer.base + partition)
            self._buffered.add(writer.base + partition)
            if len(buffer) >= self._fill:
                self._hand_over(writer, partition)

    def _stream_writer(self, source: str, system_stream: SystemStream) -> tuple[_StreamWriter, set[int]]:
        """The writer of ``system_stream`` (opened on first use) and ``source``'s touched slots, remembered
        as sent to last: a task usually sends to one stream object, which then costs two identity tests.
        Under the lock."""
        system, stream = system_stream
        if system != self.system:
            raise LogSystemError(f"producer of system '{self.system}' cannot send to '{system}.{stream}'")
        writer = self._writers.get(stream) or self._open_stream(stream)
        touched = self._touched.get(source)
        if touched is None:
            touched = self._touched[source] = set()
        self._last = (source, system_stream, writer, touched)
        return writer, touched

    def _check(self, system: str, stream: str, key: Any, message: Any) -> None:
        if system != self.system:
            raise LogSystemError(f"producer of system '{self.system}' cannot send to '{system}.{stream}'")
        if not (key is None or isinstance(key, _BYTES_LIKE)) or not (
            message is None or isinstance(message, _BYTES_LIKE)
        ):
            raise LogSystemError(
                f"log stream '{stream}': key and message must be bytes (serialized), got "
                f"{type(key).__name__} and {type(message).__name__}"
            )

    def flush(self, source: str) -> None:
        """Commit every record ``source`` sent: the buffers of the partitions it sent to since its last flush
        (with what other sources buffered there). After a failed append since the last flush, every buffer, so
        the failure surfaces to whichever source flushes next."""
        with self._lock:
            self._raise_if_fenced()
            if self._failure is not None:
                self._flush_all()
                return
            touched = self._touched.get(source)
            if touched:
                self._flush_slots(touched)

    def _flush_slots(self, touched: set[int]) -> None:
        """Append the non-empty buffers of ``touched`` and forget them; a failed append keeps the set and
        becomes ``_failure``, so the next flush of any source appends everything. Under the lock."""
        slots = self._slots
        try:
            for slot in sorted(touched):
                writer, partition = slots[slot]
                if writer.buffers[partition]:
                    self._append(writer, partition)
        except WriterFencedError:
            raise
        except Exception as error:
            self._failure = error
            raise
        touched.clear()
        if not self._buffered:
            self._held_since = None  # nothing left to linger: ``send_lingering`` has no deadline

    def send_lingering(self, drained: bool = False) -> float | None:
        """Append every buffer once its oldest record waited ``linger.ms`` (at once when ``drained``); the
        seconds left until then, or None when nothing is buffered. A failed append is raised by the next
        ``flush``, as a full buffer's is."""
        held = self._held_since
        if held is None or self._txn_log is not None:
            return None
        left = held + self._linger - _monotonic()
        if left > 0 and (not drained or self._linger_when_drained):
            return left
        with self._lock:
            self._raise_if_fenced()
            if self._failure is None:
                try:
                    self._flush_all()
                except WriterFencedError:
                    raise
                except Exception:  # kept in self._failure for the next flush
                    self._held_since = None
            else:  # the records wait for the next flush, which raises the failure: no deadline to keep
                self._held_since = None
        return None

    def _hand_over(self, writer: _StreamWriter, partition: int) -> None:
        """Append a full buffer now, unless an append failed since the last ``flush``: then the records wait
        for that flush instead of every send trying a failing file again (a partition's records stay in order
        either way: the failed ones are still at the front of their buffer). A fenced writer raises."""
        if self._failure is not None:
            return
        try:
            self._append(writer, partition)
        except WriterFencedError:
            raise
        except Exception as error:  # raised by the next flush, which appends the buffers again
            self._failure = error

    def _flush_all(self) -> None:
        if self._failure is not None:
            log.warning("log system '%s': an append failed, appending again: %s", self.system, self._failure)
        slots = self._slots
        try:
            for slot in sorted(self._buffered):  # in each stream's order of partitions, as ``_flush_slots``
                self._append(*slots[slot])  # every slot in ``_buffered`` holds records
        except WriterFencedError:
            raise
        except Exception as error:
            self._failure = error
            raise
        self._failure = None
        self._held_since = None
        for touched in self._touched.values():
            touched.clear()

    def _partition(self, writer: _StreamWriter, partition: int) -> LogPartition:
        """The open file of ``partition``, (re)opened if need be, as the most recently used; closes the least
        recently used beyond ``open_max``. Under the lock."""
        key = (writer.stream, partition)
        opened = self._open
        log = opened.get(key)
        if log is not None:
            opened.move_to_end(key)
            return log
        path = self.layout.partition_path(writer.stream, partition)
        log = LogPartition(path, writer.stream, partition, fsync=self._fsync)
        first = writer.identities.setdefault(partition, log.identity)
        if first != log.identity:
            log.close()
            raise log.replaced_error()
        opened[key] = log
        while len(opened) > self.open_max:
            opened.popitem(last=False)[1].close()
        return log

    def _append(self, writer: _StreamWriter, partition: int) -> None:
        log = self._partition(writer, partition)
        buffer = writer.buffers[partition]
        columns = buffer[0::_FIELDS], buffer[1::_FIELDS], buffer[2::_FIELDS], buffer[3::_FIELDS]
        try:
            if self._txn_log is None:
                first = log.append_columns(*columns, self._writer)
            else:
                first = log.append_columns(*columns, self._writer, self._transaction_for(writer.stream, partition))
        except WriterFencedError as fenced:
            self._fenced = self._explained(fenced)
            self._drop_buffered()  # a zombie's records are never appended, by this flush or a later one
            raise self._fenced from None
        writer.buffers[partition] = []
        writer.owners[partition] = None
        self._buffered.discard(writer.base + partition)
        self._appended[(writer.stream, partition)] = first + len(columns[2]) - 1

    def _drop_buffered(self) -> None:
        """Empty every buffer, with no owner, so that the next send to each records its slot again. Under the lock."""
        for writer in self._writers.values():
            for buffer in writer.buffers:
                buffer.clear()
            writer.owners[:] = [None] * writer.partition_count
        self._buffered.clear()

    def _transaction_for(self, stream: str, partition: int) -> int:
        """The open transaction (begun now if none is), with ``partition`` of ``stream`` recorded as one it
        appends to. Under the lock."""
        txn_log = cast(TransactionLog, self._txn_log)
        writer = cast(WriterToken, self._writer)
        member = (stream, partition)
        if self._txn is None:
            self._txn = txn_log.begin(writer, member, timeout_ms=self._txn_timeout_ms)
            self._members.add(member)
        elif member not in self._members:
            txn_log.add_partition(self._txn, writer, stream, partition)
            self._members.add(member)
        return self._txn

    def _open_stream(self, stream: str) -> _StreamWriter:
        info = self.layout.read_info(stream)
        if info is None:
            if not self._auto_create:
                raise StreamNotFoundError(
                    self.system, stream, f"create it first or set 'systems.{self.system}.auto.create.streams=true'"
                )
            self.layout.create(stream, self._default_partitions, {}, fsync=self._fsync)
            info = self.layout.require_info(stream)
        count = info.partition_count
        writer = _StreamWriter(
            stream, count, [[] for _ in range(count)], round_robin(count), base=len(self._slots), owners=[None] * count
        )
        self._slots.extend((writer, partition) for partition in range(count))
        self._writers[stream] = writer
        return writer


def _check_headers(stream: str, headers: Mapping[Any, Any]) -> dict[str, Any]:
    """A copy of ``headers`` (later changes by the sender do not reach the log) once they map str to bytes."""
    if not isinstance(headers, Mapping):
        raise LogSystemError(f"log stream '{stream}': headers must map str to bytes, got {type(headers).__name__}")
    copy = dict(headers)
    for name, value in copy.items():
        if not isinstance(name, str) or not isinstance(value, _BYTES_LIKE):
            raise LogSystemError(
                f"log stream '{stream}': headers must map str to bytes, got {type(name).__name__} "
                f"{name!r} to {type(value).__name__}"
            )
    return copy


def _partitions_of(writer: _StreamWriter, keys: Sequence[bytes | None]) -> list[int]:
    """The partitions ``send`` would choose for records with ``keys``: a key's CRC-32 modulo the partition
    count, round robin for no key."""
    partitions = writer.partition_count
    if None not in keys:
        return [crc % partitions for crc in map(_crc32, cast(Sequence[bytes], keys))]
    return [next(writer.round_robin) if key is None else _crc32(key) % partitions for key in keys]
