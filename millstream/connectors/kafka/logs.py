"""librdkafka's log lines, one line per condition rather than one per broker thread and retry.

A broker that restarts or a network that black-holes makes every librdkafka client of a container log the same
condition again and again: each broker thread's connect failure, each request that timed out, each retry of a
transaction call (15,094 ERROR lines from one broker restart). :class:`RateLimitedLog` is the ``logger`` every
client is created with (see ``KafkaClientSettings``): librdkafka calls its ``log`` with a facility and a line;
the first line of a condition is logged at once, at its own level, and further lines of the same condition
within :data:`INTERVAL_S` are only counted. The next line after the interval is logged with how many were
held back, so nothing is hidden for longer than the interval and a condition that persists stays visible.

A *condition* is the pair (facility, the line with its variable parts masked): numbers, the ``[thrd:...]``
prefix and addresses differ between broker threads and attempts but not between causes.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

INTERVAL_S = 30.0
"""Within this long, one line per condition is logged; the others are counted."""
MAX_CONDITIONS = 1024
"""Conditions remembered at once; past it the oldest are forgotten (and may log again)."""

_THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")
_VARIABLE = re.compile(r"[0-9a-fA-F]{8,}|\d+")


def condition_of(facility: str, line: str) -> tuple[str, str]:
    """The condition a librdkafka log line reports: its facility and its text with variable parts masked."""
    return facility, _VARIABLE.sub("#", _THREAD.sub("", line))


@dataclass
class _Seen:
    logged_at: float
    held_back: int = 0


class RateLimitedLog:
    """A ``logger`` for librdkafka clients: logs to ``logger``, at most one line per condition per
    ``interval_s``; thread-safe (librdkafka serves logs from whichever thread polls the client)."""

    def __init__(
        self, logger: logging.Logger, interval_s: float = INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._lock = threading.Lock()

    def log(self, level: int, msg: str, *args: object, **kwargs: object) -> None:
        """What librdkafka calls: ``log(level, "%s [%s] %s", facility, client name, line)``."""
        if not self.logger.isEnabledFor(level):
            return
        facility, line = (str(args[0]), str(args[2])) if len(args) == 3 else ("", msg % args if args else msg)
        key = condition_of(facility, line)
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.logged_at < self.interval_s:
                seen.held_back += 1
                return
            held_back = seen.held_back if seen is not None else 0
            self._seen.pop(key, None)
            self._seen[key] = _Seen(now)
            if len(self._seen) > MAX_CONDITIONS:
                del self._seen[next(iter(self._seen))]
        if held_back:
            self.logger.log(
                level,
                msg + " (%d more line(s) of this condition in the last %.0fs not logged)",
                *args,
                held_back,
                self.interval_s,
            )
        else:
            self.logger.log(level, msg, *args)
