"""A SIGTERM or SIGINT to ``spark-submit``'s JVM as a graceful stop: the containers commit before Spark stops.

Under ``spark-submit`` the JVM (``SparkSubmit``) is the parent and the Python driver its child. A signal to the
JVM runs its shutdown hooks, and Spark's (the SparkContext's stop, at once) cancels every task: containers died
without their final commit, their status stayed ``running``, and the next run repeated their output. Spark runs
its own hooks from a single hook in Hadoop's ``ShutdownHookManager`` (priority 40: ``FileSystem``'s 10 + 30),
which runs its hooks one at a time, highest priority first, each within its own timeout. This module registers a
hook of higher priority, implemented in Python through py4j's callback server: it runs first, while the
SparkContext and the executors are still up, and does what the driver's own signal handler does: it sets the
runner's stop event (containers see the stop signal in the metadata store, commit and return) and waits until the
driver has finished, Spark's session stopped included, before letting the JVM go on to Spark's hook.

Its timeout is ``job.coordinator.stop.timeout.ms`` (after which the runner cancels the containers' Spark job)
plus :data:`STOP_MARGIN_S` for that cancellation and the session's stop; if it passes, Hadoop interrupts the
wait and the shutdown goes on as before. The JVM still exits 143 after SIGTERM (130 after SIGINT): a JVM whose
shutdown a signal started exits with 128 + the signal, and only ``Runtime.halt`` could change that, skipping
whatever other hooks the JVM has.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from py4j.protocol import Py4JError
from pyspark import SparkContext
from pyspark.java_gateway import ensure_callback_server_started

log = logging.getLogger(__name__)

PRIORITY = 100
"""Above Spark's hook (40 in Hadoop's manager): Hadoop runs the higher priority first."""
STOP_MARGIN_S = 15.0
"""What the hook waits beyond the stop timeout: the runner's cancellation of the Spark job and the session's stop."""


class GracefulStopHook:
    """The ``java.lang.Runnable`` the JVM runs at shutdown (on a py4j callback thread of this process)."""

    def __init__(self, request_stop: Callable[[], None], wait_s: float) -> None:
        self._request_stop = request_stop
        self.wait_s = wait_s
        self.started = threading.Event()
        self.done = threading.Event()

    def run(self) -> None:
        self.started.set()
        print(
            "spark-submit's JVM is shutting down (SIGTERM/SIGINT): stopping containers gracefully (they commit) "
            "before Spark stops",
            file=sys.stderr,
            flush=True,
        )
        self._request_stop()
        if not self.done.wait(self.wait_s):
            log.warning("the driver did not finish within %gs of the JVM's shutdown; Spark stops now", self.wait_s)

    class Java:
        implements = ["java.lang.Runnable"]


@contextmanager
def graceful_stop_on_jvm_shutdown(
    sc: SparkContext, request_stop: Callable[[], None], stop_timeout_s: float
) -> Iterator[GracefulStopHook]:
    """Within the block, a shutdown of the driver's JVM (a signal to ``spark-submit``) calls ``request_stop`` and
    holds Spark's own shutdown until the block has exited (or the stop timeout and :data:`STOP_MARGIN_S` passed).
    Leave the block only once the SparkSession is stopped: the JVM goes on with its shutdown as soon as it is."""
    gateway = sc._gateway
    jvm = sc._jvm
    assert gateway is not None and jvm is not None
    ensure_callback_server_started(gateway)
    hook = GracefulStopHook(request_stop, stop_timeout_s + STOP_MARGIN_S)
    manager = jvm.org.apache.hadoop.util.ShutdownHookManager.get()
    # Hadoop keeps its hooks in a set: a py4j proxy would send hashCode() to Python, which has none. An unstarted
    # Thread around the proxy is a Runnable with Java's identity, whose run() calls the proxy's on Hadoop's thread.
    runnable = jvm.java.lang.Thread(hook, "millstream-graceful-stop")
    wait_ms = int(hook.wait_s * 1000) + 1000  # Hadoop's own timeout only backs up the hook's wait
    manager.addShutdownHook(runnable, PRIORITY, wait_ms, jvm.java.util.concurrent.TimeUnit.MILLISECONDS)
    # spark-submit's JVM started this driver (and told it the gateway's port); pyspark's own JVM is a child instead
    jvm_pid = os.getppid() if "PYSPARK_GATEWAY_PORT" in os.environ else None
    try:
        yield hook
    finally:
        if not hook.started.is_set():
            # a shutdown that began meanwhile refuses the removal: the hook then runs, and returns at once
            with contextlib.suppress(Py4JError):
                manager.removeShutdownHook(runnable)
        hook.done.set()
        if hook.started.is_set() and jvm_pid is not None:
            _outlive(jvm_pid, STOP_MARGIN_S)


def _outlive(jvm_pid: int, timeout_s: float) -> None:
    """Wait until the JVM is gone: py4j answers the hook's call once ``run`` has returned, on a daemon thread that
    an exiting interpreter would cut off, and the JVM would log the lost answer as the hook's failure. An orphaned
    process gets a new parent, which is how the wait sees the JVM's end."""
    deadline = time.monotonic() + timeout_s
    while os.getppid() == jvm_pid and time.monotonic() < deadline:
        time.sleep(0.05)
