"""Lookups that callers on several threads make at once, answered by one request.

A container's commit threads each ask for the offsets of their task's changelog partition at about the same time
(and its restore threads at start-up, for the partitions they restore). Asked one caller at a time, a commit round
of 1,000 tasks is 2,000 ListOffsets requests (the oldest and the end offset), each a round trip through the
brokers and through librdkafka's threads. Here a caller hands its keys over and waits: the first caller to find
no request under way takes the keys of every caller waiting and makes one request for all of them; the callers
that arrive meanwhile wait for the next, which the first of them makes as soon as this one ended. Nothing waits
on a timer (the shape of ``checkpoint/group_commit.py``): a caller alone is answered at once, and a request holds
exactly the callers that were waiting while the previous one ran, so requests grow with the load.

A request that fails (its own retries spent) fails every caller it was made for, each raising that error, which
names what failed: the brokers that did not answer, or a partition they could not answer for. That partition may be
another caller's: it fails the lookups asked together with it, each of which then fails its task's commit or start
as an unreadable offset does. No caller ever gets a missing or made-up offset.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(eq=False)
class _Caller(Generic[K, V]):
    """One caller's keys, and how the request made for them ended."""

    keys: tuple[K, ...]
    done: bool = False
    answer: Mapping[K, V] = field(default_factory=dict, repr=False)
    error: BaseException | None = field(default=None, repr=False)


class GroupedLookups(Generic[K, V]):
    """``lookup(keys)`` answered by ``fetch`` for the keys of every caller waiting at once. Thread-safe."""

    def __init__(self, fetch: Callable[[list[K]], Mapping[K, V]]) -> None:
        self._fetch = fetch
        self._changed = threading.Condition(threading.Lock())
        self._waiting: list[_Caller[K, V]] = []
        self._fetching = False
        self.requests = 0
        """Requests made so far (each caller alone would have made one per lookup)."""

    @property
    def waiting(self) -> int:
        """Callers waiting for the next request."""
        with self._changed:
            return len(self._waiting)

    def lookup(self, keys: Iterable[K]) -> dict[K, V]:
        """``fetch``'s answer for ``keys`` (the keys it answered for), from a request made for them alone or
        together with other callers'; the request's error when it failed."""
        mine: _Caller[K, V] = _Caller(tuple(keys))
        with self._changed:
            self._waiting.append(mine)
            while not mine.done:
                if self._fetching or not self._waiting:
                    self._changed.wait()
                    continue
                self._request()
        if mine.error is not None:
            raise mine.error
        return {key: mine.answer[key] for key in mine.keys if key in mine.answer}

    def _request(self) -> None:
        """Make one request for every caller waiting; called and returning with the lock held, which it releases
        while the request runs."""
        callers, self._waiting = self._waiting, []
        self._fetching = True
        self.requests += 1
        answer: Mapping[K, V] = {}
        error: BaseException | None = None
        self._changed.release()
        try:
            answer = self._fetch(list(dict.fromkeys(key for caller in callers for key in caller.keys)))
        except BaseException as failure:  # every caller raises it, this one included
            error = failure
        finally:
            self._changed.acquire()
        for caller in callers:
            caller.answer, caller.error, caller.done = answer, error, True
        self._fetching = False
        self._changed.notify_all()
