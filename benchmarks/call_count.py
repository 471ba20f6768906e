"""Python function calls made by every thread of the process: a measure of work that a busy machine does not move.

CPU seconds on a shared 2-core machine move by a third or more between runs of the same code (other processes,
caches, the hypervisor), which swamps a ratio like "1,000 tasks cost under 10x of 100". The number of Python
calls a phase makes does not: if it grows tenfold from 100 to 1,000 tasks, no Python code does per-task work
that grows with the other tasks. It does not see work inside native code (RocksDB, SQLite, librdkafka), which
the CPU figures still cover.

``CallCounter`` profiles the thread that enters it and every thread started while it is active (with
``cProfile``, about doubling the CPU a phase takes); ``calls()`` is the total so far, so a phase is the difference
of two readings. Threads started before it was entered are not counted.
"""

from __future__ import annotations

import cProfile
import gc
import threading
from itertools import chain
from operator import attrgetter
from types import FrameType
from typing import Any, Self

_CALLCOUNT = attrgetter("callcount")


class CallCounter:
    """Counts Python function calls of the entering thread and of every thread started while it is active."""

    def __init__(self) -> None:
        self._profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        threading.setprofile(self._boot)
        self._start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        threading.setprofile(None)  # None removes the hook
        with self._lock:
            for profile in self._profiles:
                profile.disable()

    def _boot(self, frame: FrameType, event: str, arg: Any) -> None:
        """The first profile event of a new thread: replace this hook by a profiler of the thread's own."""
        self._start()

    def _start(self) -> None:
        profile = cProfile.Profile()
        with self._lock:
            self._profiles.append(profile)
        profile.enable()

    def calls(self) -> int:
        """Python calls counted so far, in every profiled thread; never fewer than an earlier reading.

        A reading adds a few calls per profile to the next, not one per entry: the entries are summed in native
        code (``map``, ``sum``). A generator over them would be resumed once per entry, and this thread's profile
        counts each resumption as a call made after its own entries were read. That was a fixed cost of every
        reading, tens of thousands of calls with 64 commit threads profiled, which made a phase at 100 tasks look
        dearer per task than at 1,000.

        The garbage collector is off while the profiles are read: ``getstats`` allocates, a collection it set
        off could run finalizers, whose Python calls reshape the very (self-adjusting) tree of calls it was
        walking, so it skipped or repeated entries and a later reading could come out lower than an earlier.
        """
        with self._lock:
            profiles = list(self._profiles)
        collecting = gc.isenabled()
        gc.disable()
        try:
            stats = [profile.getstats() for profile in profiles]
            return sum(map(_CALLCOUNT, chain.from_iterable(stats)))
        finally:
            if collecting:
                gc.enable()
