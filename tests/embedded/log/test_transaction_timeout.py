"""Transaction timeouts of the embedded log (``systems.<s>.transaction.timeout.ms``): a transaction open past its
deadline can no longer commit, whoever finds it (a reader, the admin, the job's next attempt, its writer's own
commit) aborts it, exactly one of "commit" and "timeout abort" wins, and the writer learns why."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.config.settings import Settings
from millstream.contracts.systems import WriterFencedError, WriterToken
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.consumer import LogSystemConsumer
from millstream.embedded.log.errors import TransactionTimedOutError
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.log.layout import LogLayout
from millstream.embedded.log.producer import LogSystemProducer
from millstream.embedded.log.transactions import TransactionLog
from millstream.embedded.log.txn_protocol import TxnRecord, TxnState, commit_outcome, expiry_outcome
from millstream.errors import ConfigError

from .conftest import SYSTEM, create, envelope, log_config, read_all, ssp

TIMEOUT_MS = 1_000


class Clock:
    """Wall-clock milliseconds that move only when a test moves them."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def attempt(epoch: int = 1, container: str = "0") -> WriterToken:
    return WriterToken("job-1", container, 1, epoch)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def streams(root: Path, admin: LogSystemAdmin) -> Path:
    create(admin, "out", 1)
    return root


def producer(root: Path, clock: Clock, writer: WriterToken) -> LogSystemProducer:
    producer = LogSystemProducer(
        SYSTEM, LogLayout(root, SYSTEM), transactional=True, transaction_timeout_ms=TIMEOUT_MS, clock=clock
    )
    producer.set_writer(writer)
    producer.start()
    return producer


def send(producer: LogSystemProducer, *values: bytes) -> None:
    for value in values:
        producer.send("task", envelope("out", value, partition=0))
    producer.flush("task")


def seen(root: Path, clock: Clock) -> list[bytes | None]:
    """What a reader sees of ``out`` (and, by reading, which expired transaction it ends)."""
    consumer = LogSystemConsumer(SYSTEM, LogLayout(root, SYSTEM), clock=clock)
    consumer.register(ssp("out"), "0")
    consumer.start()
    try:
        first = consumer.poll({ssp("out")}, 0)  # at the stable end held, it ends the transaction if it is due
        envelopes = [e for batch in first.values() for e in batch] + read_all(consumer, {ssp("out")})
        return [e.message for e in envelopes]
    finally:
        consumer.stop()


def other_writer(root: Path, *values: bytes) -> None:
    """Records appended after the open transaction by a writer outside it."""
    plain = LogSystemFactory().get_producer(SYSTEM, log_config(root))
    for value in values:
        plain.send("other", envelope("out", value, partition=0))
    plain.stop()


def test_a_reader_held_by_a_transaction_past_its_deadline_aborts_it_and_reads_past_it(
    streams: Path, clock: Clock
) -> None:
    dead = producer(streams, clock, attempt())
    send(dead, b"dead")  # appended in its transaction, which its writer never ends
    other_writer(streams, b"after")
    clock.now += TIMEOUT_MS - 1
    assert seen(streams, clock) == []  # before the deadline it holds readers, as any open transaction
    clock.now += 1
    assert seen(streams, clock) == [b"after"]  # none of its records, and past it
    assert TransactionLog(streams, SYSTEM).open_transactions("job-1") == []


def test_the_writer_of_a_transaction_aborted_by_its_timeout_fails_its_commit_naming_it(
    streams: Path, clock: Clock
) -> None:
    writer = producer(streams, clock, attempt())
    send(writer, b"late")
    writer.stage_checkpoint("Partition 0", 2, b"{}")
    clock.now += TIMEOUT_MS
    seen(streams, clock)  # the reader aborts it first
    with pytest.raises(TransactionTimedOutError) as failure:
        writer.commit_transaction()
    message = str(failure.value)
    assert "transaction 1" in message and "container 0 attempt 1" in message
    assert "systems.log.transaction.timeout.ms" in message
    with pytest.raises(WriterFencedError):  # the attempt writes nothing more
        send(writer, b"more")
    writer.stop()
    assert seen(streams, clock) == []
    assert TransactionLog(streams, SYSTEM).checkpoints("job-1") == []  # its checkpoint was never stored


def test_a_commit_past_the_deadline_aborts_instead_and_a_late_append_of_its_writer_is_refused(
    streams: Path, clock: Clock
) -> None:
    writer = producer(streams, clock, attempt())
    send(writer, b"a")
    clock.now += TIMEOUT_MS  # nobody looked: the commit itself finds the transaction past its deadline
    with pytest.raises(TransactionTimedOutError):
        writer.commit_transaction()
    writer.stop()
    assert seen(streams, clock) == []
    successor = producer(streams, clock, attempt(epoch=2))  # the next attempt is not fenced by the retirement
    send(successor, b"b")
    successor.commit_transaction()
    successor.stop()
    assert seen(streams, clock) == [b"b"]


def test_a_zombie_append_after_a_timeout_abort_is_refused_as_timed_out(streams: Path, clock: Clock) -> None:
    writer = producer(streams, clock, attempt())
    send(writer, b"a")
    clock.now += TIMEOUT_MS
    seen(streams, clock)
    with pytest.raises(TransactionTimedOutError, match="transaction 1"):
        send(writer, b"b")  # the partition it appended to retired its attempt
    writer.stop()
    assert seen(streams, clock) == []


def test_a_transaction_committed_before_its_deadline_is_never_aborted(streams: Path, clock: Clock) -> None:
    writer = producer(streams, clock, attempt())
    for round_ in range(5):
        send(writer, b"%d" % round_)
        clock.now += TIMEOUT_MS - 1
        writer.commit_transaction()
        assert seen(streams, clock)[-1:] == [b"%d" % round_]
    writer.stop()


def test_the_admin_ends_a_transaction_past_its_deadline_before_reporting_offsets(streams: Path, clock: Clock) -> None:
    send(producer(streams, clock, attempt()), b"dead")
    other_writer(streams, b"after")
    admin = LogSystemAdmin(SYSTEM, LogLayout(streams, SYSTEM), clock=clock)
    assert admin.get_ssp_metadata([ssp("out")])[ssp("out")].upcoming_offset == "0"
    clock.now += TIMEOUT_MS
    assert admin.get_ssp_metadata([ssp("out")])[ssp("out")].upcoming_offset == "2"
    admin.stop()


def test_the_next_attempt_of_another_container_aborts_a_transaction_past_its_deadline(
    streams: Path, clock: Clock
) -> None:
    send(producer(streams, clock, attempt(container="0")), b"dead")
    clock.now += TIMEOUT_MS
    other = producer(streams, clock, attempt(container="1"))
    assert TransactionLog(streams, SYSTEM).open_transactions("job-1") == []
    send(other, b"live")
    other.commit_transaction()
    other.stop()
    assert seen(streams, clock) == [b"live"]


def test_a_timeout_not_above_the_commit_interval_is_refused_naming_the_key(root: Path) -> None:
    config = Settings(
        {**log_config(root, transaction__timeout__ms=100), "task.processing.guarantee": "exactly-once"}
    )  # task.commit.ms is 100 under exactly-once
    with pytest.raises(ConfigError, match=r"systems\.log\.transaction\.timeout\.ms \(100\) must exceed task\.commit"):
        LogSystemFactory().get_producer(SYSTEM, config)


# --- the rules -----------------------------------------------------------------------------------

events = st.lists(st.tuples(st.sampled_from(["commit", "expire"]), st.integers(0, 3_000)), max_size=12)


@given(deadline=st.integers(0, 3_000), events=events)
def test_a_transaction_is_never_both_committed_and_aborted_and_its_records_follow_its_state(
    deadline: int, events: list[tuple[str, int]]
) -> None:
    """Any interleaving of the writer's commit requests and anyone's timeout checks, at any times: the state
    only leaves OPEN once, a commit succeeds only before the deadline and an abort only at or after it, and a
    model reader sees the records exactly when the transaction committed."""
    record = TxnRecord(1, "0", 1, 1, TxnState.OPEN, deadline)
    winners = []
    for event, now in events:
        if event == "commit":
            outcome = commit_outcome(record, now)
            if outcome is not None:
                assert (outcome is TxnState.COMMITTED) == (now < deadline)
                winners.append(outcome)
                record = TxnRecord(1, "0", 1, 1, outcome, deadline)
        else:
            outcome = expiry_outcome(record, now)
            if outcome is not record.state:
                assert outcome is TxnState.ABORTED and now >= deadline and record.state is TxnState.OPEN
                winners.append(outcome)
                record = TxnRecord(1, "0", 1, 1, outcome, deadline)
    assert len(winners) <= 1
    visible = record.state is TxnState.COMMITTED
    assert visible == (winners == [TxnState.COMMITTED])
    assert (record.state is TxnState.ABORTED) == (winners == [TxnState.ABORTED])


steps = st.lists(
    st.one_of(
        st.tuples(st.just("send"), st.integers(1, 3)),
        st.tuples(st.just("wait"), st.integers(0, 2 * TIMEOUT_MS)),
        st.tuples(st.just("commit"), st.just(0)),
        st.tuples(st.just("read"), st.just(0)),
    ),
    max_size=14,
)


@settings(max_examples=25, deadline=None)
@given(steps=steps)
def test_readers_see_exactly_the_committed_records_whatever_the_commits_timeouts_and_reads_interleave(
    steps: list[tuple[str, int]],
) -> None:
    """A writer sends, commits and waits (its clock moving past deadlines or not) while a reader reads, which ends
    transactions past their deadline: a reader always sees exactly the records of the commits that succeeded, in
    order; a commit that failed with ``TransactionTimedOutError`` shows none of its records, now or later; a
    timed-out attempt is followed by the next one, as a container's restart."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory) / "log"
        admin = LogSystemAdmin(SYSTEM, LogLayout(root, SYSTEM))
        create(admin, "out", 1)
        clock, epoch, sent = Clock(), 1, 0
        writer = producer(root, clock, attempt(epoch))
        committed: list[bytes] = []
        pending: list[bytes] = []
        for step, amount in steps:
            if step == "send":
                values = [b"%d" % (sent + i) for i in range(amount)]
                sent += amount
                try:
                    send(writer, *values)
                    pending += values
                except TransactionTimedOutError:  # a reader aborted its transaction: this attempt is done
                    writer.stop()
                    epoch, pending = epoch + 1, []
                    writer = producer(root, clock, attempt(epoch))
            elif step == "wait":
                clock.now += amount
            elif step == "commit":
                try:
                    writer.commit_transaction()
                    committed, pending = committed + pending, []
                except TransactionTimedOutError:
                    writer.stop()
                    epoch, pending = epoch + 1, []
                    writer = producer(root, clock, attempt(epoch))
            else:
                assert seen(root, clock) == committed
        writer.stop()
        assert seen(root, clock) == committed  # stopping discards the open transaction
        admin.stop()
