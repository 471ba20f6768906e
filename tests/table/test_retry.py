"""The retry schedule: exponential backoff capped, within the attempts and the budget."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from millstream.table.retry import RetryPolicy


def test_backoff_doubles_up_to_its_cap_and_stops_at_the_last_attempt():
    policy = RetryPolicy(max_attempts=5, backoff=0.1, backoff_max=0.3, budget=100)
    assert [policy.delay(n, 0) for n in range(1, 6)] == [0.1, 0.2, 0.3, 0.3, None]
    assert policy.exhausted(5) == "max attempts 5 reached"


@given(
    attempts=st.integers(min_value=1, max_value=20),
    elapsed=st.floats(min_value=0, max_value=20, allow_nan=False),
    budget=st.floats(min_value=0, max_value=10, allow_nan=False),
)
def test_no_retry_starts_past_the_budget(attempts, elapsed, budget):
    policy = RetryPolicy(max_attempts=10, backoff=0.5, backoff_max=4, budget=budget)
    delay = policy.delay(attempts, elapsed)
    if delay is not None:
        assert attempts < 10
        assert elapsed + delay <= budget
    elif attempts < 10:
        assert policy.exhausted(attempts).startswith("retry budget of")
