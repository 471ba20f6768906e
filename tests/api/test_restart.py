"""A task's state across restarts: restored at init, replayed envelopes skipped, nothing forgotten."""

from __future__ import annotations

from functools import partial

from hypothesis import given, settings
from hypothesis import strategies as st

from millstream.api.application import InputDescriptor
from millstream.api.windows import Count, TumblingWindow, WindowPane
from millstream.control.messages import EndOfStreamMessage, WatermarkMessage
from millstream.model import IncomingMessageEnvelope, SystemStream
from millstream.operators.graph_task import GraphSettings
from millstream.operators.state import StoreBackedState, StoreControlState
from millstream.storage.inmemory import InMemoryKeyValueStorageEngine
from millstream.storage.kv import TaskKeyValueStore
from tests.api.harness import Driver, application, task_graph

BY_USER = SystemStream("log", "app-1-by-user")
I0 = BY_USER.partition(0)


def downstream_app():
    def describe(app):
        app.input(InputDescriptor("log.in", timestamp=lambda m: m["ts"])).partition_by(
            lambda m: m["user"], name="by-user"
        ).window(TumblingWindow(10), key=lambda kv: kv.key, aggregate=Count(), name="counts").send_to("log.out")

    return application(describe)


def consumer(producers: int = 2, **options) -> Driver:
    return Driver(task_graph(downstream_app(), [I0], stages=[1], producers=producers, **options))


def panes(driver: Driver) -> list:
    return [envelope.message for envelope in driver.collector.to("log.out")]


def restart(driver: Driver, snapshot: dict, **options) -> Driver:
    """A new task restored from ``snapshot``, fed again from ``driver``'s offsets onwards."""
    restarted = consumer(**options)
    restarted.graph.restore(snapshot)
    restarted.offsets = dict(driver.offsets)
    return restarted


def test_a_restarted_downstream_task_remembers_which_producers_already_ended():
    """Samza rebuilt this from re-read messages only: a restart after committing past task 0's
    end-of-stream waited forever for it. Here the state comes back and task 1's end-of-stream suffices."""
    before = consumer()
    before.user(I0, "u", {"n": 1}, 3)
    before.control(I0, EndOfStreamMessage("Partition 0", 2))
    snapshot = before.checkpoint()
    assert snapshot is not None

    after = restart(before, snapshot)
    after.control(I0, EndOfStreamMessage("Partition 1", 2))
    assert after.coordinator.ended == [I0]
    assert panes(after) == [WindowPane("u", 0, 10, 1)]


def test_window_contents_survive_a_restart():
    before = consumer(producers=1)
    before.user(I0, "u", {"n": 1}, 3)
    before.user(I0, "u", {"n": 2}, 4)
    snapshot = before.checkpoint()
    assert snapshot is not None
    after = restart(before, snapshot, producers=1)
    after.user(I0, "u", {"n": 3}, 5)
    after.control(I0, WatermarkMessage(10, "Partition 0", 1))
    assert panes(after) == [WindowPane("u", 0, 10, 3)]


def test_envelopes_a_restart_replays_are_skipped_up_to_the_restored_offsets():
    before = consumer(producers=1)
    for n in range(3):
        before.user(I0, "u", {"n": n}, n)
    snapshot = before.checkpoint()
    assert snapshot is not None
    after = consumer(producers=1)
    after.graph.restore(snapshot)
    after.offsets = {I0: 0}  # the checkpoint was written before the state: offsets 1 and 2 come again
    after.user(I0, "u", {"n": 1}, 1)
    after.user(I0, "u", {"n": 2}, 2)
    after.user(I0, "u", {"n": 3}, 3)
    after.control(I0, WatermarkMessage(10, "Partition 0", 1))
    assert panes(after) == [WindowPane("u", 0, 10, 4)]


def test_a_partition_that_had_ended_is_declared_ended_again_at_the_first_call_after_a_restart():
    before = Driver(task_graph(downstream_app(), [I0, BY_USER.partition(1)], stages=[1], producers=1))
    before.control(I0, EndOfStreamMessage("Partition 0", 1))
    snapshot = before.checkpoint()
    assert snapshot is not None
    after = Driver(task_graph(downstream_app(), [I0, BY_USER.partition(1)], stages=[1], producers=1))
    after.graph.restore(snapshot)
    after.tick()
    assert after.coordinator.ended == [I0]


def test_an_unchanged_task_writes_no_new_state():
    driver = consumer()
    driver.user(I0, "u", {"n": 1}, 3)
    assert driver.checkpoint() is not None
    assert driver.checkpoint() is None


def test_aggregate_control_messages_not_yet_flushed_are_resent_after_a_restart():
    settings = GraphSettings(aggregate=True)
    source = SystemStream("log", "in").partition(0)

    def producer() -> Driver:
        return Driver(task_graph(downstream_app(), [source], stages=[0], partitions=4, settings=settings))

    before = producer()
    before.source(source, {"user": "u", "ts": 5}, 0)
    before.tick()
    snapshot = before.checkpoint()  # sends the deferred watermark; it is in flight until the next flush
    assert snapshot is not None
    sent = [e for e in before.collector.to(str(BY_USER)) if e.partition is not None]
    assert len(sent) == 1
    after = producer()
    after.graph.restore(snapshot)
    after.offsets = dict(before.offsets)
    after.tick()
    resent = [e for e in after.collector.to(str(BY_USER)) if e.partition is not None]
    assert [(e.partition, e.message) for e in resent] == [(e.partition, e.message) for e in sent]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_restart_point_gives_the_output_of_an_uninterrupted_run(data):
    """Messages and control messages of two producers in any order; the task is restarted at a random
    commit, and replayed from a random earlier checkpoint. Output after the restart plus output before
    the commit equals the uninterrupted output (panes emitted between commit and crash come again)."""
    events = []
    for producer in ("Partition 0", "Partition 1"):
        times = sorted(data.draw(st.lists(st.integers(0, 39), max_size=6), label=producer))
        for ts in times:
            events.append(("user", producer, ts))
        for mark in sorted(data.draw(st.lists(st.integers(0, 45), max_size=3), label=f"{producer} marks")):
            events.append(("wm", producer, mark))
        events.append(("eos", producer, 0))
    order = data.draw(st.permutations(events))
    # a producer's messages to one partition stay in its order; interleave producers only
    per_producer = {p: [e for e in events if e[1] == p] for p in ("Partition 0", "Partition 1")}
    interleaved = []
    cursors = {p: 0 for p in per_producer}
    for event in order:
        producer = event[1]
        interleaved.append(per_producer[producer][cursors[producer]])
        cursors[producer] += 1

    def feed(driver: Driver, event) -> None:
        kind, producer, value = event
        if kind == "user":
            driver.user(I0, "u", {"from": producer}, value)
        elif kind == "wm":
            driver.control(I0, WatermarkMessage(value, producer, 2))
        else:
            driver.control(I0, EndOfStreamMessage(producer, 2))

    reference = consumer()
    for event in interleaved:
        feed(reference, event)

    commit_at = data.draw(st.integers(0, len(interleaved)), label="commit at")
    checkpoint_at = data.draw(st.integers(0, commit_at), label="checkpoint at")
    first = consumer()
    for event in interleaved[:commit_at]:
        feed(first, event)
    snapshot = first.checkpoint()
    emitted_before_commit = panes(first)
    second = consumer()
    if snapshot is not None:
        second.graph.restore(snapshot)
    second.offsets = {I0: checkpoint_at - 1} if checkpoint_at else {}
    for event in interleaved[checkpoint_at:]:
        feed(second, event)
    second.tick()  # the timer: a partition restored as ended is declared ended at the first call
    assert emitted_before_commit + panes(second) == panes(reference)
    assert second.coordinator.ended == reference.coordinator.ended == [I0]


def test_restored_offsets_use_the_systems_offset_order():
    graph = task_graph(downstream_app(), [I0], stages=[1], producers=1)
    graph.comparators = {"log": lambda a, b: (int(a) > int(b)) - (int(a) < int(b))}
    graph.restore({"offsets": {I0.key(): "10"}})
    driver = Driver(graph)
    driver.graph.process(IncomingMessageEnvelope(I0, "9", None, b"\x00{}", 0), driver.collector, driver.coordinator)
    assert driver.graph.offsets[I0] == "10"


def test_a_watermark_the_timer_advanced_is_persisted_with_the_windows_it_fired():
    app = application(
        lambda app: (
            app.input(InputDescriptor("log.in", timestamp=lambda m: m["ts"]))
            .window(TumblingWindow(10), aggregate=Count())
            .send_to("log.out")
        )
    )
    source = SystemStream("log", "in").partition(0)
    driver = Driver(task_graph(app, [source]))
    driver.source(source, {"ts": 3}, 0)
    driver.source(source, {"ts": 12}, 0)
    assert driver.checkpoint() is not None
    driver.tick()  # fires [0, 10): the state to persist changed without a message
    assert panes(driver) == [WindowPane(None, 0, 10, 1)]
    snapshot = driver.checkpoint()
    assert snapshot is not None
    restored = Driver(task_graph(app, [source]))
    restored.graph.restore(snapshot)
    restored.end(source)
    assert panes(restored) == [WindowPane(None, 10, 20, 1)], "the fired window is not fired again"


def store_backed(shared: TaskKeyValueStore, **options) -> Driver:
    return consumer(producers=1, state_factory=partial(StoreBackedState, shared), **options)


def test_windows_in_the_operator_store_survive_a_restart_with_the_control_state_written_beside_them():
    """The store-backed path: the control state goes into the same store as the windows, and a task
    restored from that store alone (no snapshot of the windows anywhere else) gives the uninterrupted output."""
    shared = TaskKeyValueStore("Partition 0", "operator-state", InMemoryKeyValueStorageEngine())
    before = store_backed(shared)
    before.user(I0, "u", {"n": 1}, 3)
    before.user(I0, "v", {"n": 2}, 4)
    snapshot = before.checkpoint()
    assert snapshot is not None and "state" not in snapshot["operators"]["counts"]
    StoreControlState(shared, "Partition 0", before.graph.flush_state).save(snapshot)
    before.user(I0, "u", {"n": 3}, 5)  # after the commit: lost with the crash, replayed below

    after = store_backed(shared)
    after.graph.restore(StoreControlState(shared, "Partition 0", after.graph.flush_state).load() or {})
    after.user(I0, "u", {"n": 1}, 3)  # the replay from offset 0: what the store holds is skipped
    after.user(I0, "v", {"n": 2}, 4)
    after.user(I0, "u", {"n": 3}, 5)
    after.control(I0, WatermarkMessage(10, "Partition 0", 1))
    assert sorted(panes(after), key=lambda pane: pane.key) == [WindowPane("u", 0, 10, 2), WindowPane("v", 0, 10, 1)]
