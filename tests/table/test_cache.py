"""The table cache against a model: never a value older than its TTL, never one other than the last stored,
never more entries than its size (time as an input)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from millstream.table.cache import MISSING, TtlCache

operations = st.lists(
    st.tuples(
        st.sampled_from(["get", "put", "invalidate"]),
        st.integers(min_value=0, max_value=6),
        st.floats(min_value=0, max_value=3, allow_nan=False),
    ),
    max_size=80,
)


@given(max_size=st.integers(min_value=1, max_value=5), ttl=st.floats(0.5, 5), operations=operations)
def test_a_hit_is_the_last_value_stored_for_its_key_within_the_ttl_and_the_size_is_bounded(max_size, ttl, operations):
    cache = TtlCache(max_size, ttl)
    stored: dict[int, tuple[float, int]] = {}
    now = 0.0
    for step, (operation, key, advance) in enumerate(operations):
        now += advance
        if operation == "put":
            cache.put(key, step, now)
            stored[key] = (now, step)
        elif operation == "invalidate":
            cache.invalidate(key)
            stored.pop(key, None)
        else:
            value = cache.get(key, now)
            if value is not MISSING:
                when, expected = stored[key]
                assert value == expected, "the last value stored"
                assert now - when < ttl, "never past its TTL"
        assert len(cache) <= max_size


def test_the_least_recently_used_entry_goes_first_and_an_expired_one_is_a_miss():
    cache = TtlCache(2, ttl=10)
    cache.put("a", 1, 0)
    cache.put("b", 2, 0)
    assert cache.get("a", 1) == 1  # a is now the most recent
    cache.put("c", 3, 1)
    assert cache.get("b", 1) is MISSING
    assert cache.get("a", 1) == 1
    assert cache.get("a", 10) is MISSING
