"""The graceful-stop signal handler counts the signals this process received, not the stop event: under
spark-submit the JVM's shutdown hook sets the same event when a SIGTERM reaches the whole process group, and
that one signal must stay a graceful stop rather than read as a second one."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from millstream.coordinator.signals import graceful_stop_on_signals


def test_a_first_signal_after_a_stop_requested_elsewhere_is_graceful_and_a_second_one_interrupts():
    stop = threading.Event()
    with graceful_stop_on_signals(stop):
        stop.set()  # as the JVM's shutdown hook does, or SparkJobRunner.request_stop
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs in the main thread, at the next bytecode
        assert stop.is_set()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)


def test_the_previous_handlers_come_back_after_the_block():
    before = signal.getsignal(signal.SIGTERM)
    with graceful_stop_on_signals(threading.Event()):
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before
