"""A share of the user records for watermark records: how many a wide stream's rounds may cost, per stream.

Pacing (``pacing``) bounds watermark records by time: at most one round per interval per stream, a round being
one record per partition in broadcast mode. For a wide stream that is still a lot: a container of a 128 x 128
job sends 128 records per round, five rounds a second at the default 200 ms, and whether that is 1 % of the
user records or 4 % depends only on how fast the job happens to process them (issue 36 asks for at most 1 %).
The budget makes the bound hold at any rate: per key (a container's produced stream) a token bucket, counted in
records, fed by

* a *share* of the user records written to the stream (``wrote``: ``share`` tokens per record), and
* a *floor* of ``floor_records`` per watermark interval, so a narrow or slow stream keeps its interval;

a round due by the pacer goes out only when the tokens pay for what it writes (``affords``, then ``spent``),
otherwise it waits — the caller re-checks at timer ticks — but never longer than ``max_delay_ms`` after it
first waited: then it goes out anyway (*forced*), and the bucket is emptied rather than left in debt, so a wide
stream at a low rate still advances every ``max_delay_ms`` and pays for that with nothing it does not have.

Guarantees, over any time ``T`` of one key with ``U`` user records written and ``F`` forced rounds of ``Q``
records: the records of its rounds are at most ``share x U + floor_records x T / interval + Q x (1 + F)`` (the
bucket starts with one round; it holds at most ``BURST`` rounds, so a window boundary's early send after an
ordinary one is paid for at high rates, as the pacer's bucket of two allows), and a forced round goes out at
least ``max_delay_ms`` after the previous one. A round of at most ``floor_records`` records — every round of a
narrow stream (broadcast, Q <= ``floor_records``) and every first hop of aggregate mode (one record) — is not
budgeted at all: the floor alone pays one per interval, more than the pacer ever lets through in the long run,
so such streams behave exactly as without a budget. The budget only ever delays a round: which watermark a
round carries, and what it follows in its partitions, is the caller's (``combining``).

Pure bookkeeping over an injected clock (seconds), as the rest of the protocol; not thread-safe (one container's
run-loop thread).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from millstream.control.pacing import BURST

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class BudgetSettings:
    """``app.control.watermark.budget.*``: the share of user records (0: no budget), the floor in records per
    watermark interval, and the longest a due round waits; ``interval_ms`` is the watermark interval (0: every
    advance is sent, no budget)."""

    share: float = 0.0
    floor_records: int = 8
    max_delay_ms: int = 2000
    interval_ms: int = 200

    def __post_init__(self) -> None:
        if not 0 <= self.share <= 1:
            raise ValueError(f"a watermark budget's share of the user records must be in [0, 1], got {self.share}")
        if self.floor_records < 0 or self.max_delay_ms < 0 or self.interval_ms < 0:
            raise ValueError(f"a watermark budget's floor, maximum delay and interval cannot be negative: {self}")

    @property
    def enabled(self) -> bool:
        return self.share > 0 and self.interval_ms > 0 and self.max_delay_ms > 0


class WatermarkBudget(Generic[K]):
    """Per key, the records its rounds may still cost (module docstring). ``wrote`` feeds it, ``affords`` asks
    whether a due round of ``cost`` records may go out now (and starts its wait if not), ``spent`` records that
    a round went out. ``forced`` counts the rounds that went out unpaid after waiting ``max_delay_ms``."""

    __slots__ = ("floor_rate", "forced", "max_delay", "refilled", "settings", "tokens", "unpaid", "waiting", "written")

    def __init__(self, settings: BudgetSettings) -> None:
        self.settings = settings
        self.floor_rate = settings.floor_records * 1000 / settings.interval_ms if settings.interval_ms else 0.0
        """Tokens per second of the floor."""
        self.max_delay = settings.max_delay_ms / 1000
        self.tokens: dict[K, float] = {}
        """Records left per key as of ``refilled``; a key not in it starts with one round."""
        self.refilled: dict[K, float] = {}
        self.written: dict[K, int] = {}
        """User records written since the last refill, per key."""
        self.waiting: dict[K, float] = {}
        """Per key, since when a due round waits for tokens."""
        self.unpaid: dict[K, bool] = {}
        """Per key, whether the round ``affords`` let through now is a forced one."""
        self.forced = 0

    def exempt(self, cost: int) -> bool:
        """Whether a round of ``cost`` records is not budgeted: no budget, or the floor pays for it every interval."""
        return not self.settings.enabled or cost <= self.settings.floor_records

    def wrote(self, key: K, records: int) -> None:
        """The container wrote ``records`` user records to ``key``'s stream."""
        if records > 0:
            self.written[key] = self.written.get(key, 0) + records

    def affords(self, key: K, cost: int, now: float) -> bool:
        """Whether a due round of ``cost`` records may go out now: the tokens pay for it, or it has waited
        ``max_delay_ms``. If not, the round waits from now (or from when it first waited)."""
        if self.exempt(cost):
            return True
        if self._refill(key, cost, now) >= cost - 1e-9:
            self.unpaid[key] = False
            return True
        since = self.waiting.setdefault(key, now)
        if now - since >= self.max_delay - 1e-9:
            self.unpaid[key] = True
            return True
        return False

    def spent(self, key: K, cost: int, now: float) -> None:
        """A round of ``cost`` records went out now (0: the round turned out to have nothing to say); a forced
        one empties the bucket instead of leaving it in debt."""
        self.waiting.pop(key, None)
        unpaid = self.unpaid.pop(key, False)
        if self.exempt(cost):
            return
        tokens = self._refill(key, cost, now)
        if unpaid and tokens < cost - 1e-9:
            self.forced += 1
        self.tokens[key] = max(0.0, tokens - cost)

    def _refill(self, key: K, cost: int, now: float) -> float:
        settings = self.settings
        last = self.refilled.get(key)
        tokens = float(cost) if last is None else self.tokens[key] + self.floor_rate * max(0.0, now - last)
        tokens = min(BURST * cost, tokens + settings.share * self.written.pop(key, 0))
        self.tokens[key], self.refilled[key] = tokens, now
        return tokens
