"""Ctrl-C and SIGTERM as a graceful stop, the same for every runner.

The first signal asks the containers to commit and stop (the runner's stop event); the runner then
returns ``stopped`` and the CLI exits 0. A second signal stops without waiting (``KeyboardInterrupt``).
"Second" counts the signals this process received, not the stop event: under ``spark-submit`` a SIGTERM to the
process group reaches the JVM too, whose shutdown hook sets the same event (``millstream.spark.run.shutdown_hook``),
and that one signal must not read as two.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger(__name__)


@contextmanager
def graceful_stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM set ``stop`` once, then interrupt; the previous handlers
    come back afterwards. Only the main thread may install handlers, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        if len(received) > 1:
            log.warning("second signal: stopping without waiting")
            raise KeyboardInterrupt
        print(f"\n{signal.Signals(signum).name}: stopping containers gracefully (they commit)", file=sys.stderr)
        stop.set()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
