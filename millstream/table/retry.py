"""When to retry a failed remote call, sans-IO: Samza's ``TableRetryPolicy`` with exponential backoff.

A call is tried at most ``max_attempts`` times, waiting ``backoff`` seconds after the first failure and
``multiplier`` times longer after each next one (at most ``backoff_max``); and never past ``budget`` seconds
after its first attempt started: a retry whose wait would end beyond the budget is not made. Both bounds
keep a service that is down from holding a message forever: the call then fails, naming the table and key,
and the message goes to ``task.process.errors``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3
    backoff: float = 0.1
    backoff_max: float = 5.0
    multiplier: float = 2.0
    budget: float = 30.0

    def delay(self, attempts: int, elapsed: float) -> float | None:
        """After ``attempts`` failed attempts, ``elapsed`` seconds since the first began: the seconds to wait
        before the next attempt, or None when the attempts or the budget are used up."""
        if attempts >= self.max_attempts:
            return None
        wait = min(self.backoff_max, self.backoff * self.multiplier ** (attempts - 1))
        if elapsed + wait > self.budget:
            return None
        return wait

    def exhausted(self, attempts: int) -> str:
        """Why no retry follows ``attempts`` failed ones, for the error."""
        if attempts >= self.max_attempts:
            return f"max attempts {self.max_attempts} reached"
        return f"retry budget of {self.budget * 1000:.0f} ms used up"
