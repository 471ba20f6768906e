"""The cache in front of a remote table, sans-IO (the time is an argument): at most ``max_size`` entries,
each valid ``ttl`` seconds after it was stored, least recently used evicted first.

Samza's ``CachingTable`` in Python. Guarantees: a read never returns an entry older than ``ttl``, nor a
value other than the last one stored (or written through the table) for its key; the cache never holds
more than ``max_size`` entries. Only records found are cached: a key the service does not know is asked
again next time.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

MISSING: Any = object()
"""What ``get`` returns for a key not cached (or expired)."""


class TtlCache:
    def __init__(self, max_size: int, ttl: float) -> None:
        if max_size < 1 or ttl <= 0:
            raise ValueError(f"a cache needs max_size >= 1 and ttl > 0, not {max_size} and {ttl}")
        self.max_size = max_size
        self.ttl = ttl
        self._entries: OrderedDict[Any, tuple[float, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Any, now: float) -> Any:
        """The value cached for ``key``, or ``MISSING``; an expired entry is dropped."""
        entry = self._entries.get(key)
        if entry is None:
            return MISSING
        stored, value = entry
        if now - stored >= self.ttl:
            del self._entries[key]
            return MISSING
        self._entries.move_to_end(key)
        return value

    def put(self, key: Any, value: Any, now: float) -> None:
        entries = self._entries
        entries[key] = (now, value)
        entries.move_to_end(key)
        while len(entries) > self.max_size:
            entries.popitem(last=False)

    def invalidate(self, key: Any) -> None:
        self._entries.pop(key, None)
