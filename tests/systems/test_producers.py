"""The producer pool hands out a container's state producer behind a lock under at-least-once: its stores write back
on the container's thread and its commits made beside processing write back and flush on commit threads, and a
transactional producer takes one call at a time (a send during another thread's commit of the transaction is
refused; a flush finding another thread's flush under way would return before its sends are durable). A flush
lets the sends already waiting go first, so that one commit of the transaction covers them all."""

from __future__ import annotations

import contextlib
import threading

from millstream.contracts.systems import SystemProducer
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.systems.producers import SerializedProducer
from tests.helpers import wait_until

STREAM = SystemStream("log", "changelog")
FAILING = "Partition 9"


class OneCallAtATime(SystemProducer):
    """A producer that records its calls, whose flush waits for ``gate``, and that fails any call made while
    another one is under way (as librdkafka refuses a send while a transaction commits)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.gate = threading.Event()
        self.flushing = threading.Event()
        self._busy = False

    def _enter(self, name: str) -> None:
        assert not self._busy, f"{name} called while another call is under way"
        self._busy = True
        self.events.append(name)

    def start(self) -> None:
        pass

    @property
    def flush_covers_every_source(self) -> bool:
        return True  # as a transactional Kafka producer's, whose flush commits the transaction

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        self._enter("send")
        self._busy = False
        if source == FAILING:
            raise RuntimeError("the broker refused it")

    def flush(self, source: str) -> None:
        self._enter("flush")
        self.flushing.set()
        assert self.gate.wait(10), "the test never released the flush"
        self.events.append("flushed")
        self._busy = False

    def stop(self) -> None:
        pass


def test_a_send_from_another_thread_waits_for_the_flush_under_way_on_a_serialized_producer():
    inner = OneCallAtATime()
    producer = SerializedProducer(inner)
    flusher = threading.Thread(target=producer.flush, args=("Partition 0",), name="commit-0")
    flusher.start()
    wait_until(inner.flushing.is_set, 10, "the commit thread's flush to be under way")
    attempted = threading.Event()
    failures: list[BaseException] = []

    def send() -> None:
        attempted.set()
        try:
            producer.send("Partition 1", OutgoingMessageEnvelope(STREAM, b"v", b"k"))
        except BaseException as error:
            failures.append(error)

    sender = threading.Thread(target=send, name="container")
    sender.start()
    wait_until(attempted.is_set, 10, "the container's thread to send")
    inner.gate.set()
    flusher.join(10)
    sender.join(10)
    assert failures == [] and inner.events == ["flush", "flushed", "send"]


def _flush_under_way(inner: OneCallAtATime, producer: SerializedProducer) -> threading.Thread:
    flusher = threading.Thread(target=producer.flush, args=("Partition 0",), name="commit-0")
    flusher.start()
    wait_until(inner.flushing.is_set, 10, "the first commit thread's flush to be under way")
    return flusher


def _send_in_thread(producer: SerializedProducer, source: str) -> threading.Thread:
    def send() -> None:
        with contextlib.suppress(RuntimeError):
            producer.send(source, OutgoingMessageEnvelope(STREAM, b"v", b"k"))

    sender = threading.Thread(target=send, name=f"commit-{source}")
    sender.start()
    return sender


def _flush_in_thread(producer: SerializedProducer, source: str) -> threading.Thread:
    asked = threading.Event()

    def flush() -> None:
        asked.set()
        producer.flush(source)

    flusher = threading.Thread(target=flush, name=f"commit-flush-{source}")
    flusher.start()
    wait_until(asked.is_set, 10, "a commit thread to ask for a flush")
    return flusher


def test_a_flush_lets_the_sends_already_waiting_go_first_so_one_transaction_commit_covers_them():
    inner = OneCallAtATime()
    producer = SerializedProducer(inner)
    first = _flush_under_way(inner, producer)
    second = _flush_in_thread(producer, "Partition 1")  # in line for the lock before the sends
    senders = [_send_in_thread(producer, f"Partition {partition}") for partition in range(1, 6)]
    wait_until(lambda: producer._sends_asked == 5, 10, "five commit threads to wait to send")
    inner.gate.set()
    for thread in [first, second, *senders]:
        thread.join(10)
        assert not thread.is_alive(), f"{thread.name} never finished"
    assert inner.events == ["flush", "flushed", *["send"] * 5, "flush", "flushed"]


def test_a_send_that_failed_still_ends_the_wait_of_a_flush_in_line_with_it():
    inner = OneCallAtATime()
    producer = SerializedProducer(inner)
    first = _flush_under_way(inner, producer)
    second = _flush_in_thread(producer, FAILING)
    sender = _send_in_thread(producer, FAILING)
    wait_until(lambda: producer._sends_asked == 1, 10, "the commit thread to wait to send")
    inner.gate.set()
    for thread in [first, second, sender]:
        thread.join(10)
        assert not thread.is_alive(), f"{thread.name} never finished"
    assert inner.events == ["flush", "flushed", "send", "flush", "flushed"]
