"""A token bucket of credits per second, sans-IO (the time is an argument): the rate limiter of a table.

Samza's ``TableRateLimiter`` takes credits per call before it goes out; here a call *reserves* its credits
and learns how long to wait before it may go: the bucket may go into debt, so callers waiting together are
spaced at the rate in the order they asked, and nobody polls. Guarantee: over any interval of length ``t``,
calls granted (reserve time + wait) in it used at most ``burst + rate * t`` credits, as long as no call takes
more than ``burst`` (a larger one waits until the bucket refilled what it takes beyond the burst).

One limiter serves every task of a container (``TableProvider``): all of them run on the container's event
loop thread, so it needs no lock.
"""

from __future__ import annotations


class RateLimiter:
    """``rate`` credits per second, at most ``burst`` (default: one second's worth, at least 1) saved up."""

    def __init__(self, rate: float, burst: float | None = None, now: float = 0.0) -> None:
        if rate <= 0:
            raise ValueError(f"a rate limiter needs a rate > 0, not {rate}")
        self.rate = rate
        self.burst = burst if burst is not None else max(rate, 1.0)
        self._tokens = self.burst
        self._last = now

    def reserve(self, credits: float, now: float) -> float:
        """Take ``credits`` at ``now``: the seconds the caller must wait before its call goes out (0: at once)."""
        elapsed = max(0.0, now - self._last)
        self._last = max(self._last, now)
        tokens = min(self.burst, self._tokens + elapsed * self.rate) - credits
        self._tokens = tokens
        return 0.0 if tokens >= 0 else -tokens / self.rate
