"""Window boundaries (``millstream.control.boundary``): when a watermark's advance may close a window, and
the period every window end of an application is a multiple of."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.control.boundary import NO_BOUNDARY, boundary_period, crosses
from millstream.control.messages import MIN_WATERMARK


def test_an_advance_crosses_a_boundary_exactly_when_it_reaches_a_multiple_of_the_period():
    assert not crosses(0, 999, 1000)
    assert crosses(999, 1000, 1000), "a window [0, 1000) fires at watermark 1000"
    assert not crosses(1000, 1999, 1000)
    assert crosses(500, 3500, 1000), "several boundaries at once count as one crossing"
    assert crosses(MIN_WATERMARK, 0, 1000), "the first watermark"
    assert crosses(-1500, -1000, 1000), "negative event times floor like the windows' starts"


def test_without_a_boundary_no_advance_crosses_one():
    assert not crosses(MIN_WATERMARK, 10**12, NO_BOUNDARY)


@given(st.integers(-(10**9), 10**9), st.integers(0, 2000), st.integers(1, 3000))
def test_a_crossing_means_a_window_end_lies_in_the_advance(previous, step, period):
    watermark = previous + step
    ends_passed = [end for end in range(previous + 1, watermark + 1) if end % period == 0]
    assert crosses(previous, watermark, period) == bool(ends_passed)


def test_the_boundary_period_is_the_gcd_of_the_windows_periods():
    assert boundary_period([]) == NO_BOUNDARY
    assert boundary_period([10_000]) == 10_000
    assert boundary_period([60_000, 10_000, 15_000]) == 5_000
    with pytest.raises(ValueError, match="-5 ms"):
        boundary_period([1000, -5])
