"""``InFlightWindow``: the checkpointable offset of a partition never passes a message still in flight, and
every message is released exactly once, in start order, whatever order completions come in."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.runtime.async_window import InFlightWindow


def test_a_completion_behind_one_in_flight_releases_nothing_until_the_head_completes():
    window: InFlightWindow[int, str] = InFlightWindow()
    for offset in ("0", "1", "2"):
        window.started(0, offset, offset)
    assert window.completed(0, "2") == [] and window.committable(0) is None
    assert window.completed(0, "0") == ["0"] and window.committable(0) == "0"
    assert window.completed(0, "1") == ["1", "2"] and window.committable(0) == "2"
    assert window.in_flight == 0 and window.pending(0) == 0


def test_partitions_are_independent():
    window: InFlightWindow[int, str] = InFlightWindow()
    window.started(0, "5", "a")
    window.started(1, "9", "b")
    assert window.completed(1, "9") == ["b"]
    assert window.committable(1) == "9" and window.committable(0) is None


def test_a_message_started_or_completed_twice_is_refused():
    window: InFlightWindow[int, str] = InFlightWindow()
    window.started(0, "1", "x")
    with pytest.raises(ValueError, match="already in flight"):
        window.started(0, "1", "x")
    window.completed(0, "1")
    window.started(0, "2", "y")
    window.started(0, "3", "z")
    window.completed(0, "3")
    with pytest.raises(ValueError, match="completed twice"):
        window.completed(0, "3")


@st.composite
def schedules(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    """Starts in offset order per partition, interleaved with completions of any started message."""
    counts = draw(st.lists(st.integers(0, 12), min_size=1, max_size=3))
    events: list[tuple[str, int, int]] = []
    next_offset = dict.fromkeys(range(len(counts)), 0)
    running: list[tuple[int, int]] = []
    while any(next_offset[p] < c for p, c in enumerate(counts)) or running:
        startable = [p for p, c in enumerate(counts) if next_offset[p] < c]
        if startable and (not running or draw(st.booleans())):
            partition = draw(st.sampled_from(startable))
            events.append(("start", partition, next_offset[partition]))
            running.append((partition, next_offset[partition]))
            next_offset[partition] += 1
        else:
            partition, offset = running.pop(draw(st.integers(0, len(running) - 1)))
            events.append(("complete", partition, offset))
    return events


@given(schedules())
def test_the_committable_offset_is_always_the_end_of_the_completed_prefix(events):
    window: InFlightWindow[int, int] = InFlightWindow()
    completed: dict[int, set[int]] = {}
    released: dict[int, list[int]] = {}
    for kind, partition, offset in events:
        if kind == "start":
            window.started(partition, str(offset), offset)
            continue
        completed.setdefault(partition, set()).add(offset)
        released.setdefault(partition, []).extend(window.completed(partition, str(offset)))
        prefix = 0
        while prefix in completed[partition]:
            prefix += 1
        expected = str(prefix - 1) if prefix else None
        assert window.committable(partition) == expected, "never past a message in flight, never behind the prefix"
        assert released[partition] == list(range(prefix)), "released once each, in order"
    assert window.in_flight == 0
    for partition, offsets in completed.items():
        assert released[partition] == sorted(offsets)
