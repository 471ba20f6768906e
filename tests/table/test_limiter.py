"""The rate limiter's rule, under any sequence of requests and clock advances (time as an input)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from millstream.table.limiter import RateLimiter

requests = st.lists(
    st.tuples(st.floats(min_value=0, max_value=2, allow_nan=False), st.integers(min_value=1, max_value=20)),
    min_size=1,
    max_size=60,
)


@given(rate=st.floats(min_value=0.5, max_value=500, allow_nan=False), requests=requests)
def test_calls_granted_in_any_interval_never_use_more_than_the_burst_plus_the_rate_over_it(rate, requests):
    limiter = RateLimiter(rate, burst=20)  # no call takes more than the burst
    now, granted = 0.0, []
    for advance, credits in requests:
        now += advance
        wait = limiter.reserve(credits, now)
        assert wait >= 0
        granted.append((now + wait, credits))
    granted.sort()
    for i, (start, _) in enumerate(granted):
        used = 0
        for end, credits in granted[i:]:
            used += credits
            assert used <= limiter.burst + rate * (end - start) + 1e-6 * max(1.0, used)


@given(requests=requests)
def test_requests_under_the_rate_never_wait(requests):
    limiter = RateLimiter(1000, burst=1000)
    now = 0.0
    for advance, credits in requests:
        now += max(advance, credits / 1000)  # never faster than the rate
        assert limiter.reserve(credits, now) == 0


def test_callers_waiting_together_are_spaced_at_the_rate_in_the_order_they_asked():
    limiter = RateLimiter(10, burst=1)
    waits = [limiter.reserve(1, 5.0) for _ in range(4)]
    assert waits == [0.0, 0.1, 0.2, 0.30000000000000004] or [round(w, 9) for w in waits] == [0, 0.1, 0.2, 0.3]
