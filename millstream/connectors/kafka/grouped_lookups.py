"""Lookups that callers on several threads make at once, answered by one request.

A container's commit threads each ask for the offsets of their task's changelog partition at about the same time
(and its restore threads at start-up, for the partitions they restore). Asked one caller at a time, a commit round
of 1,000 tasks is 2,000 ListOffsets requests (the oldest and the end offset), each a round trip through the
brokers and through librdkafka's threads. Here a caller hands its keys over and waits: the first caller to find
no request under way takes the keys of every caller waiting and makes one request for all of them; the callers
that arrive meanwhile wait for the next, which the first of them makes as soon as this one ended
(``millstream/grouped_calls.py``: no timer, a caller alone is answered at once, the requests grow with the load).

A request that fails (its own retries spent) fails every caller it was made for, each raising that error, which
names what failed: the brokers that did not answer, or a partition they could not answer for. That partition may be
another caller's: it fails the lookups asked together with it, each of which then fails its task's commit or start
as an unreadable offset does. No caller ever gets a missing or made-up offset.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

from millstream.grouped_calls import GroupedCalls

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class GroupedLookups(Generic[K, V]):
    """``lookup(keys)`` answered by ``fetch`` for the keys of every caller waiting at once. Thread-safe."""

    def __init__(self, fetch: Callable[[list[K]], Mapping[K, V]]) -> None:
        self._fetch = fetch
        self._calls: GroupedCalls[tuple[K, ...], dict[K, V]] = GroupedCalls(self._request)

    @property
    def requests(self) -> int:
        """Requests made so far (each caller alone would have made one per lookup)."""
        return self._calls.batches

    @property
    def waiting(self) -> int:
        """Callers waiting for the next request."""
        return self._calls.waiting

    def lookup(self, keys: Iterable[K]) -> dict[K, V]:
        """``fetch``'s answer for ``keys`` (the keys it answered for), from a request made for them alone or
        together with other callers'; the request's error when it failed."""
        return self._calls.call(tuple(keys))

    def _request(self, callers: list[tuple[K, ...]]) -> list[dict[K, V]]:
        """One ``fetch`` of every caller's keys, each key once; each caller's answer is its own keys'."""
        answer = self._fetch(list(dict.fromkeys(key for keys in callers for key in keys)))
        return [{key: answer[key] for key in keys if key in answer} for keys in callers]
