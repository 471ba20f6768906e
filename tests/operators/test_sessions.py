"""Session windows: gap-based sessions per key that merge, fire on the watermark, and survive restarts."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.api.application import InputDescriptor, StreamApplicationDescriptor
from millstream.api.errors import ApplicationError
from millstream.api.windows import Aggregate, Collect, Count, MergingAggregator, SessionWindow, WindowPane
from millstream.operators.sessions import SessionWindowImpl
from tests.api.harness import SOURCE, Driver, application, task_graph

A0 = SOURCE.partition(0)
GAP = 10


def sessions_app(aggregate=None, lateness=0):
    return application(
        lambda app: (
            app.input(InputDescriptor("log.in", timestamp=lambda m: m["ts"]))
            .window(
                SessionWindow(GAP),
                key=lambda m: m["k"],
                aggregate=aggregate or Collect(lambda m: m["n"]),
                allowed_lateness_ms=lateness,
                name="sessions",
            )
            .send_to("log.out")
        )
    )


def panes(driver: Driver) -> list[WindowPane]:
    return [envelope.message for envelope in driver.collector.to("log.out")]


def feed(driver: Driver, events: Iterable[tuple[str, int, int]]) -> None:
    for key, ts, n in events:
        driver.source(A0, {"k": key, "ts": ts, "n": n}, 0)


def reference_sessions(events: Iterable[tuple[str, int, int]], gap: int) -> dict[tuple[str, int, int], list[int]]:
    """Sessions in plain Python: per key in event-time order, a new session after more than ``gap``."""
    by_key: dict[str, list[tuple[int, int]]] = {}
    for key, ts, n in events:
        by_key.setdefault(key, []).append((ts, n))
    sessions: dict[tuple[str, int, int], list[int]] = {}
    for key, stamped in by_key.items():
        stamped.sort()
        groups: list[list[tuple[int, int]]] = []
        for ts, n in stamped:
            if groups and ts - groups[-1][-1][0] <= gap:
                groups[-1].append((ts, n))
            else:
                groups.append([(ts, n)])
        for group in groups:
            sessions[(key, group[0][0], group[-1][0] + gap)] = sorted(n for _, n in group)
    return sessions


def final_panes(emitted: list[WindowPane]) -> dict[tuple[str, int, int], list[int]]:
    """The last pane of every session no later pane of its key covers (a merge supersedes its parts)."""
    final: dict[tuple[str, int, int], list[int]] = {}
    for index, pane in enumerate(emitted):
        covered = any(
            later.key == pane.key and later.start <= pane.start and later.end >= pane.end
            for later in emitted[index + 1 :]
        )
        if not covered:
            final[(pane.key, pane.start, pane.end)] = sorted(pane.value)
    return final


def test_a_session_fires_once_the_watermark_passes_its_last_event_plus_the_gap():
    driver = Driver(task_graph(sessions_app(), [A0]))
    feed(driver, [("a", 1, 1), ("a", 8, 2), ("b", 5, 3), ("a", 18, 4)])
    driver.tick()  # watermark 18: a's session [1, 28) and b's [5, 15) are open
    feed(driver, [("b", 27, 5)])
    driver.tick()  # watermark 27
    assert panes(driver) == [WindowPane("b", 5, 15, [3])]
    assert [e.timestamp for e in driver.collector.sent] == [14]
    feed(driver, [("a", 40, 6)])
    driver.tick()  # watermark 40
    assert panes(driver)[1:] == [WindowPane("a", 1, 28, [1, 2, 4]), WindowPane("b", 27, 37, [5])]
    driver.end(A0)
    assert panes(driver)[3:] == [WindowPane("a", 40, 50, [6])]


def test_an_event_between_two_sessions_merges_them_and_one_exactly_a_gap_later_joins():
    driver = Driver(task_graph(sessions_app(aggregate=Count()), [A0]))
    feed(driver, [("a", 0, 1), ("a", 30, 2), ("a", 20, 3), ("b", 0, 4), ("b", 11, 5), ("a", 10, 6)])
    driver.end(A0)
    assert panes(driver) == [WindowPane("b", 0, 10, 1), WindowPane("b", 11, 21, 1), WindowPane("a", 0, 40, 4)]


def test_a_late_event_within_the_allowed_lateness_updates_the_pane_and_beyond_is_dropped_and_counted():
    driver = Driver(task_graph(sessions_app(lateness=20), [A0]))
    feed(driver, [("a", 0, 1), ("a", 25, 2)])
    driver.tick()  # watermark 25: [0, 10) fired, kept until 30
    assert panes(driver) == [WindowPane("a", 0, 10, [1])]
    feed(driver, [("a", 5, 3)])  # within the lateness: [0, 15) due at once, as an update
    assert panes(driver)[1:] == [WindowPane("a", 0, 15, [1, 3], update=True)]
    feed(driver, [("a", 90, 4)])
    driver.tick()  # watermark 90: [0, 15) purged at 35
    feed(driver, [("a", 12, 5)])  # [12, 22): 22 + 20 <= 90
    window = driver.graph.graph.impls["sessions"]
    assert isinstance(window, SessionWindowImpl) and window.late_dropped == 1
    driver.end(A0)
    assert panes(driver)[2:] == [WindowPane("a", 25, 35, [2]), WindowPane("a", 90, 100, [4])]


def test_a_fired_session_a_late_event_extends_beyond_the_watermark_fires_again_at_its_new_end():
    driver = Driver(task_graph(sessions_app(lateness=100), [A0]))
    feed(driver, [("a", 0, 1), ("a", 12, 2)])
    driver.tick()  # watermark 12: [0, 10) fired
    feed(driver, [("a", 9, 3)])  # bridges [0, 10) and [12, 22): not due yet
    assert panes(driver) == [WindowPane("a", 0, 10, [1])]
    feed(driver, [("b", 30, 4)])
    driver.tick()
    assert panes(driver)[1:] == [WindowPane("a", 0, 22, [1, 3, 2], update=True)]  # parts by start


def test_sessions_and_their_timers_survive_a_restart():
    before = Driver(task_graph(sessions_app(lateness=15), [A0]))
    feed(before, [("a", 0, 1), ("b", 18, 2), ("a", 20, 3)])
    before.tick()  # watermark 20
    snapshot = before.checkpoint()
    assert snapshot is not None and panes(before) == [WindowPane("a", 0, 10, [1])]
    after = Driver(task_graph(sessions_app(lateness=15), [A0]))
    after.graph.restore(snapshot)
    after.offsets = dict(before.offsets)
    feed(after, [("a", 8, 4), ("a", 25, 5), ("c", 40, 6)])  # 8 is late, within the lateness of [0, 10)
    after.tick()  # watermark 40: b's session fires from its restored timer
    assert panes(after) == [
        WindowPane("a", 0, 18, [1, 4], update=True),
        WindowPane("b", 18, 28, [2]),
        WindowPane("a", 20, 35, [3, 5]),
    ]


def test_a_session_window_refuses_an_aggregator_that_cannot_merge_naming_it():
    app = StreamApplicationDescriptor()
    stream = app.input("log.in")
    with pytest.raises(ApplicationError, match="session window merges sessions, but aggregator Aggregate has no"):
        stream.window(SessionWindow(5), aggregate=Aggregate(lambda: 0, lambda a, m: a + 1), name="s")
    stream.window(SessionWindow(5), aggregate=Aggregate(lambda: 0, lambda a, m: a + 1, merge=lambda a, b: a + b))


def test_an_aggregate_given_merge_is_a_merging_aggregator_and_one_without_is_not():
    merging = Aggregate(lambda: 0, lambda a, m: a + m, merge=lambda a, b: a + b)
    assert isinstance(merging, MergingAggregator) and merging.merge(2, 3) == 5
    assert merging.add(merging.initial(), 4) == 4
    assert not isinstance(Aggregate(lambda: 0, lambda a, m: a + m), MergingAggregator)


events_strategy = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 200)), min_size=1, max_size=40).map(
    lambda pairs: [(key, ts, n) for n, (key, ts) in enumerate(pairs)]
)


@settings(max_examples=150, deadline=None)
@given(events=events_strategy, ticks=st.lists(st.booleans(), min_size=40, max_size=40), data=st.data())
def test_merged_sessions_equal_a_plain_python_sessionizer_over_any_order_of_events_within_lateness(events, ticks, data):
    order = data.draw(st.permutations(events))
    driver = Driver(task_graph(sessions_app(lateness=1000), [A0]))
    for event, tick in zip(order, ticks, strict=False):
        feed(driver, [event])
        if tick:
            driver.tick()
    driver.end(A0)
    emitted = panes(driver)
    assert final_panes(emitted) == reference_sessions(events, GAP)
    for index, pane in enumerate(emitted):
        grew = any(
            earlier.key == pane.key and pane.start <= earlier.start and earlier.end <= pane.end
            for earlier in emitted[:index]
        )
        assert pane.update == grew, f"pane {pane} after {emitted[:index]}"
