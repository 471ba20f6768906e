"""The producer pool hands out a container's state producer behind a lock under at-least-once: its stores write back
on the container's thread and its commits made beside processing write back and flush on commit threads, and a
transactional producer takes one call at a time (a send during another thread's commit of the transaction is
refused; a flush finding another thread's flush under way would return before its sends are durable)."""

from __future__ import annotations

import threading

from millstream.contracts.systems import SystemProducer
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.systems.producers import SerializedProducer
from tests.helpers import wait_until

STREAM = SystemStream("log", "changelog")


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

    def send(self, source: str, envelope: OutgoingMessageEnvelope) -> None:
        self._enter("send")
        self._busy = False

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
