"""Window boundaries: the event times at which a watermark's advance closes a window somewhere downstream.

Watermarks move on timers — a source's on ``app.watermark.interval.ms``, a produced stream's at most once per
``app.control.watermark.interval.ms`` (``pacing``) — which bounds what they cost, but makes a window wait up
to both intervals after its end was passed before it fires. Only some advances matter for output: a
tumbling or sliding window fires when the watermark reaches its end, and every end of every fixed window of
an application is a multiple of one *boundary period* ``g`` (the planner's ``watermark_boundary_ms``: the gcd
of the windows' sizes and slides). An advance that moved ``floor(watermark / g)`` may close a window and goes
out at once (a produced stream's: if the pacer has a send left, ``pacing``); every other advance waits for its
interval as before. Session windows and stream joins close
at event times that depend on the data, so they have no boundary and keep the interval.

Pure arithmetic, shared by the source side (``source``) and the pacer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

NO_BOUNDARY = 0
"""The boundary period of an application without fixed windows: every advance waits for its interval."""


def crosses(previous: int, watermark: int, period_ms: int) -> bool:
    """Whether advancing from ``previous`` to ``watermark`` passes a multiple of ``period_ms`` — a window end
    (``floor(watermark / g)`` moved). Never with ``NO_BOUNDARY``."""
    return period_ms > 0 and watermark // period_ms > previous // period_ms


def boundary_period(periods: Iterable[int]) -> int:
    """The period every one of ``periods`` is a multiple of (their gcd); ``NO_BOUNDARY`` for none."""
    period = NO_BOUNDARY
    for value in periods:
        if value <= 0:
            raise ValueError(f"a window boundary period must be positive, got {value} ms")
        period = math.gcd(period, value)
    return period
