"""Transactions of the embedded log (exactly-once): appends of an open transaction are invisible, and so is
everything after them, until the transaction is published; an aborted one leaves a gap readers step over; a
container's next attempt fences the earlier one, publishes what it committed and discards what it did not."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.config.settings import Settings
from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.storage import FORMAT_VERSION, LogPartition
from millstream.embedded.log.transactions import TransactionLog
from millstream.embedded.log.txn_protocol import TxnRecord, TxnState, fenced_by, recovery

from .conftest import SYSTEM, create, envelope, log_config, read_all, ssp


def attempt(epoch: int, generation: int = 1, container: str = "0") -> WriterToken:
    return WriterToken("job-1", container, generation, epoch)


def append(log: LogPartition, *values: bytes, txn: int | None = None) -> int:
    return log.append_columns([1_000] * len(values), None, list(values), None, None, txn)


def values(log: LogPartition, start: int = 0) -> list[tuple[int, bytes]]:
    """``(offset, value)`` of every record a reader sees from ``start``."""
    out = []
    while (records := log.read(start, 100)) is not None:
        out += [(records.start + i, value) for i, value in enumerate(records.values)]
        start = records.start + len(records.values)
    return out


@pytest.fixture
def log(tmp_path: Path) -> Iterator[LogPartition]:
    partition = LogPartition(tmp_path / "p0.db", "out", 0, create=True)
    yield partition
    partition.close()


# --- one partition -------------------------------------------------------------------------------


def test_an_open_transaction_hides_its_records_and_every_record_after_them(log: LogPartition) -> None:
    append(log, b"a")
    append(log, b"b", b"c", txn=7)
    append(log, b"d")  # another writer's, after the open transaction
    assert values(log) == [(0, b"a")]
    state = log.state()
    assert (state.upcoming, state.written, state.settled) == (1, 4, False)
    log.resolve(7, commit=True)
    assert values(log) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert log.state().settled


def test_an_aborted_transaction_leaves_a_gap_that_reads_step_over(log: LogPartition) -> None:
    append(log, b"a")
    append(log, b"b", b"c", txn=7)
    append(log, b"d")
    log.resolve(7, commit=False)
    assert values(log) == [(0, b"a"), (3, b"d")]
    assert values(log, start=1) == [(3, b"d")]  # a read from inside the gap starts at the next record
    assert log.readable_from(1) == 3
    log.resolve(7, commit=False)  # idempotent
    assert values(log) == [(0, b"a"), (3, b"d")]


def test_a_trailing_gap_ends_where_the_log_ends(log: LogPartition) -> None:
    append(log, b"a")
    append(log, b"b", txn=3)
    log.resolve(3, commit=False)
    assert log.read(1, 10) is None
    assert log.readable_from(1) == 2 == log.state().upcoming


def test_trimming_never_passes_the_first_open_transaction(log: LogPartition) -> None:
    append(log, b"a", b"b")
    append(log, b"c", txn=1)
    assert log.trim(10) == 2
    log.resolve(1, commit=True)
    assert values(log, start=2) == [(2, b"c")]


def test_a_file_of_the_previous_format_gains_the_pending_table_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "p0.db"
    LogPartition(path, "out", 0, create=True).close()
    with sqlite3.connect(path) as connection:
        connection.execute("DROP TABLE pending")
        connection.execute(f"PRAGMA user_version = {FORMAT_VERSION - 1}")
    connection.close()
    reopened = LogPartition(path, "out", 0)
    append(reopened, b"a", txn=1)
    assert values(reopened) == []
    reopened.close()


# --- producers and the coordinator ---------------------------------------------------------------


def eos_config(root: Path) -> Settings:
    return Settings({**log_config(root), "task.processing.guarantee": "exactly-once"})


def producer(root: Path, writer: WriterToken) -> LogSystemProducer:
    producer = LogSystemFactory().get_producer(SYSTEM, eos_config(root))
    producer.set_writer(writer)
    producer.start()
    return producer


@pytest.fixture
def streams(root: Path, admin: LogSystemAdmin) -> Path:
    create(admin, "out", 2)
    create(admin, "changelog")
    return root


def seen(root: Path, stream: str = "out", partitions: int = 2) -> list[bytes | None]:
    consumer: LogSystemConsumer = LogSystemFactory().get_consumer(SYSTEM, log_config(root))
    for partition in range(partitions):
        consumer.register(ssp(stream, partition), "0")
    consumer.start()
    try:
        return sorted(e.message for e in read_all(consumer, {ssp(stream, p) for p in range(partitions)}))
    finally:
        consumer.stop()


def send(producer: LogSystemProducer, *values: bytes, stream: str = "out") -> None:
    for index, value in enumerate(values):
        producer.send("task", envelope(stream, value, partition=index % 2 if stream == "out" else 0))
    producer.flush("task")


def test_a_commit_makes_every_partition_and_the_checkpoints_visible_together(streams: Path) -> None:
    writer = producer(streams, attempt(1))
    send(writer, b"a", b"b")
    send(writer, b"s", stream="changelog")
    writer.stage_checkpoint("Partition 0", 2, b"{}")
    assert seen(streams) == [] and seen(streams, "changelog", 1) == []  # flushed, not committed
    coordinator = TransactionLog(streams, SYSTEM)
    assert coordinator.checkpoints("job-1") == []
    writer.commit_transaction()
    assert seen(streams) == [b"a", b"b"] and seen(streams, "changelog", 1) == [b"s"]
    assert [(task, value) for task, _, value, _ in coordinator.checkpoints("job-1")] == [("Partition 0", b"{}")]
    assert coordinator.open_transactions("job-1") == []
    writer.stop()
    coordinator.close()


def test_the_writers_view_of_a_partition_includes_its_open_transaction(streams: Path, admin: LogSystemAdmin) -> None:
    writer = producer(streams, attempt(1))
    send(writer, b"s", stream="changelog")
    changelog = ssp("changelog")
    assert admin.get_ssp_metadata([changelog])[changelog].newest_offset is None
    assert admin.get_written_ssp_metadata([changelog])[changelog].newest_offset == "0"
    writer.stop()


def test_the_producer_reports_its_open_transactions_appends_as_the_writers_view_and_forgets_them_when_discarded(
    streams: Path, admin: LogSystemAdmin
) -> None:
    writer = producer(streams, attempt(1))
    send(writer, b"s", b"t", stream="changelog")
    changelog = ssp("changelog")
    assert writer.written_offsets([changelog]) == {changelog: "1"}
    assert admin.get_written_ssp_metadata([changelog])[changelog].newest_offset == "1"
    writer.stop()  # no commit: the transaction is discarded, and with it what its appends returned
    assert writer.written_offsets([changelog]) == {}


def test_stopping_without_a_commit_discards_the_open_transaction(streams: Path) -> None:
    writer = producer(streams, attempt(1))
    send(writer, b"lost")
    writer.stop()
    other = producer(streams, attempt(1, container="1"))
    send(other, b"kept", b"kept too")
    other.commit_transaction()
    other.stop()
    assert seen(streams) == [b"kept", b"kept too"]


def test_a_new_attempt_discards_what_its_killed_predecessor_did_not_commit(streams: Path) -> None:
    killed = producer(streams, attempt(1))
    send(killed, b"uncommitted")
    successor = producer(streams, attempt(2))  # the killed attempt never stopped: its transaction was open
    assert seen(streams) == []
    send(successor, b"after")
    successor.commit_transaction()
    assert seen(streams) == [b"after"]
    successor.stop()


def test_a_new_attempt_publishes_what_its_predecessor_committed_before_it_died(streams: Path) -> None:
    killed = producer(streams, attempt(1))
    send(killed, b"a", b"b")
    killed.stage_checkpoint("Partition 0", 2, b"{}")
    coordinator = TransactionLog(streams, SYSTEM)
    (txn,) = coordinator.open_transactions("job-1")
    coordinator.commit(txn, attempt(1), {("Partition 0", 2): b"{}"})  # the commit point, then a crash
    assert seen(streams) == []
    successor = producer(streams, attempt(2))
    assert seen(streams) == [b"a", b"b"]
    assert coordinator.open_transactions("job-1") == []
    successor.stop()
    coordinator.close()


def test_a_zombie_resumed_after_its_replacement_started_commits_nothing_and_appends_nothing(streams: Path) -> None:
    zombie = producer(streams, attempt(1))
    send(zombie, b"zombie")
    replacement = producer(streams, attempt(2))
    with pytest.raises(WriterFencedError, match="attempt 2 of generation 1 of the container"):
        zombie.commit_transaction()
    with pytest.raises(WriterFencedError):
        send(zombie, b"more")
    zombie.stop()
    send(replacement, b"replacement")
    replacement.commit_transaction()
    assert seen(streams) == [b"replacement"]
    replacement.stop()


def test_a_zombie_cannot_append_to_a_partition_its_transaction_held_once_the_replacement_aborted_it(
    streams: Path,
) -> None:
    zombie = producer(streams, attempt(1))
    send(zombie, b"first")
    replacement = producer(streams, attempt(2))
    log = LogPartition(streams / "out" / "p0.db", "out", 0)
    with pytest.raises(WriterFencedError):  # what the zombie's producer would append with its open transaction
        log.append_columns([1], None, [b"late"], None, attempt(1), zombie._txn)
    log.close()
    replacement.stop()


def test_a_consumer_moves_past_a_trailing_gap_so_a_reader_waiting_for_the_end_finishes(
    streams: Path, consumer: LogSystemConsumer
) -> None:
    zombie = producer(streams, attempt(1))
    send(zombie, b"x", stream="changelog")
    producer(streams, attempt(2)).stop()  # discards it
    consumer.register(ssp("changelog"), "0")
    consumer.start()
    assert consumer.poll({ssp("changelog")}, 0) == {}
    assert consumer.position(ssp("changelog")) == "1"


# --- the rules -----------------------------------------------------------------------------------

writers = st.tuples(st.sampled_from(["0", "1", "2"]), st.integers(1, 3), st.integers(0, 3))


@given(recorded=st.lists(writers, max_size=3, unique_by=lambda w: w[0]), writer=writers)  # a row per container
def test_a_writer_is_fenced_exactly_when_its_job_or_its_container_has_moved_on(
    recorded: list[tuple[str, int, int]], writer: tuple[str, int, int]
) -> None:
    container, generation, epoch = writer
    token = WriterToken("job-1", container, generation, epoch)
    newer_generation = any(g > generation for _, g, _ in recorded)
    newer_attempt = any(c == container and (g, e) > (generation, epoch) for c, g, e in recorded)
    assert (fenced_by(recorded, token) is not None) == (newer_generation or newer_attempt)


@given(
    records=st.lists(st.tuples(writers, st.sampled_from(list(TxnState))), max_size=8, unique_by=lambda r: r[0]),
    writer=writers,
)
def test_a_new_writer_publishes_every_committed_transaction_and_aborts_only_fenced_open_ones(
    records: list[tuple[tuple[str, int, int], TxnState]], writer: tuple[str, int, int]
) -> None:
    token = WriterToken("job-1", *writer)
    txns = [TxnRecord(index, c, g, e, state) for index, ((c, g, e), state) in enumerate(records)]
    plan = dict(recovery(txns, token))
    for record in txns:
        fenced = fenced_by([writer], WriterToken("job-1", record.container, record.generation, record.epoch))
        if record.state is TxnState.COMMITTED:
            assert plan[record.txn] is True
        elif fenced is not None or record.state is TxnState.ABORTED:  # aborted by its timeout, not yet ended
            assert plan[record.txn] is False
        else:
            assert record.txn not in plan  # a current writer's open transaction is its own to end


def test_at_least_once_a_batch_of_checkpoints_is_stored_together_and_a_fenced_writers_batch_not_at_all(
    streams: Path,
) -> None:
    coordinator = TransactionLog(streams, SYSTEM)
    batch = {(f"Partition {p}", version): f"{p}-{version}".encode() for p in range(30) for version in (1, 2)}
    coordinator.put_checkpoints(attempt(1), batch)
    stored = coordinator.checkpoints("job-1")
    assert {(task, version): value for task, version, value, _ in stored} == batch
    coordinator.register(attempt(2))
    with pytest.raises(WriterFencedError, match="fenced off"):
        coordinator.put_checkpoints(attempt(1), {key: b"zombie" for key in batch})
    assert {value for _, _, value, _ in coordinator.checkpoints("job-1")} == set(batch.values())
    coordinator.close()
