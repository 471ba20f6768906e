"""One task's operators, driven envelope by envelope: messages, watermarks, end-of-stream, windows."""

from __future__ import annotations

import orjson
import pytest

from millstream.api.application import KV, InputDescriptor
from millstream.api.table import InMemoryTableDescriptor
from millstream.api.windows import Collect, Count, SlidingWindow, TumblingWindow, WindowPane
from millstream.control.framing import MessageType, unframe
from millstream.control.messages import MAX_WATERMARK, MIN_WATERMARK, EndOfStreamMessage, WatermarkMessage
from millstream.control.sender import aggregate_partition
from millstream.model import SystemStream, SystemStreamPartition
from millstream.operators.graph import OperatorError
from millstream.operators.graph_task import GraphSettings
from millstream.operators.windows import WindowImpl
from tests.api.harness import SOURCE, Collector, Driver, application, route, task_graph

A0 = SOURCE.partition(0)
A1 = SOURCE.partition(1)
BY_USER = SystemStream("log", "app-1-by-user")
I0, I1 = BY_USER.partition(0), BY_USER.partition(1)


def values(driver: Driver, stream: str = "log.out") -> list:
    return [envelope.message for envelope in driver.collector.to(stream)]


def controls(driver: Driver) -> list[tuple[int | None, object]]:
    return [
        (envelope.partition, unframe(envelope.message)[1])
        for envelope in driver.collector.to(str(BY_USER))
        if unframe(envelope.message)[0] != MessageType.USER_MESSAGE
    ]


class Hooked:
    """A map function with watermark and end-of-stream hooks."""

    def __init__(self) -> None:
        self.watermarks: list[int] = []

    def __call__(self, message):
        return message

    def on_watermark(self, watermark):
        self.watermarks.append(watermark)
        return [f"wm {watermark}"] if watermark < MAX_WATERMARK else None

    def on_end_of_stream(self):
        return ["the end"]


# --- stateless operators ---------------------------------------------------------------------------


def test_map_filter_flat_map_and_send_to_transform_each_message_in_order():
    app = application(
        lambda app: (
            app.input("log.in")
            .flat_map(lambda m: [m, m + 100])
            .filter(lambda m: m % 2 == 0)
            .map(lambda m: m * 10)
            .send_to("log.out")
        )
    )
    driver = Driver(task_graph(app, [A0]))
    for value in (1, 2, 3, 4):
        driver.source(A0, value, timestamp=value)
    assert values(driver) == [20, 1020, 40, 1040]
    assert [e.timestamp for e in driver.collector.sent] == [2, 2, 4, 4]


def test_send_to_writes_a_kv_as_key_and_value_and_otherwise_the_key_function():
    def describe(app):
        stream = app.input(InputDescriptor("log.in", kv=True))
        stream.send_to("log.kv")
        stream.map(lambda kv: kv.value).send_to("log.keyed", key=lambda m: m["id"])

    driver = Driver(task_graph(application(describe), [A0]))
    driver.source(A0, {"id": 7}, timestamp=1, key="k")
    ((kv,), (keyed,)) = driver.collector.to("log.kv"), driver.collector.to("log.keyed")
    assert (kv.key, kv.message) == ("k", {"id": 7})
    assert (keyed.key, keyed.message) == (7, {"id": 7})


def test_inner_join_drops_messages_without_a_record_and_left_join_keeps_them():
    table = InMemoryTableDescriptor("users", {"u1": "Ann"})

    def describe(app):
        stream = app.input("log.in")
        stream.join(table, key=lambda m: m["user"], joiner=lambda m, name: f"{m['user']}={name}").send_to("log.inner")
        stream.join(table, key=lambda m: m["user"], joiner=lambda m, name: name, how="left").send_to("log.left")

    driver = Driver(task_graph(application(describe), [A0]))
    driver.source(A0, {"user": "u1"}, 1)
    driver.source(A0, {"user": "u2"}, 2)
    assert values(driver, "log.inner") == ["u1=Ann"]
    assert values(driver, "log.left") == ["Ann", None]


def test_a_sink_gets_every_message_with_the_collector_and_coordinator():
    seen = []
    app = application(
        lambda app: app.input("log.in").sink(lambda m, collector, coordinator: seen.append((m, coordinator)))
    )
    driver = Driver(task_graph(app, [A0]))
    driver.source(A0, "x", 1)
    assert seen == [("x", driver.coordinator)]


def test_a_failing_function_fails_naming_the_operator_stream_partition_and_offset():
    app = application(lambda app: app.input("log.in").map(lambda m: 1 / m, name="invert").send_to("log.out"))
    driver = Driver(task_graph(app, [A0]))
    driver.source(A0, 1, 1)
    with pytest.raises(
        OperatorError, match=r"operator 'invert' failed: ZeroDivisionError.*offset 1 of stream 'log.in' partition 0"
    ):
        driver.source(A0, 0, 2)


# --- watermarks ------------------------------------------------------------------------------------


def test_source_watermark_is_emitted_periodically_from_event_times_minus_out_of_orderness():
    hooked = Hooked()
    app = application(
        lambda app: app.input(InputDescriptor("log.in", max_out_of_orderness_ms=5)).map(hooked).sink(lambda *a: None)
    )
    driver = Driver(task_graph(app, [A0]))
    driver.source(A0, "a", 100)
    driver.source(A0, "b", 90)
    assert hooked.watermarks == []  # not per message
    driver.tick()
    assert hooked.watermarks == [95]
    driver.tick()
    assert hooked.watermarks == [95]  # only when it advances
    driver.source(A0, "c", 120)
    driver.tick()
    assert hooked.watermarks == [95, 115]


def test_a_tasks_watermark_is_the_minimum_over_its_partitions():
    app = application(lambda app: app.input("log.in").sink(lambda *a: None))
    driver = Driver(task_graph(app, [A0, A1]))
    driver.source(A0, "a", 100)
    driver.tick()
    assert driver.graph.task_watermark == MIN_WATERMARK
    driver.source(A1, "b", 40)
    driver.tick()
    assert driver.graph.task_watermark == 40


def test_an_operators_input_watermark_is_the_minimum_over_the_operators_feeding_it():
    hooked = Hooked()

    def describe(app):
        a = app.input("log.a").map(lambda m: m)
        b = app.input("log.b")
        a.merge(b).map(hooked).sink(lambda *args: None)

    b0 = SystemStream("log", "b").partition(0)
    a0 = SystemStream("log", "a").partition(0)
    driver = Driver(task_graph(application(describe), [a0, b0]))
    driver.source(a0, "x", 50)
    driver.tick()
    assert hooked.watermarks == []
    driver.source(b0, "y", 30)
    driver.tick()
    assert hooked.watermarks == [30]
    driver.end(b0)
    assert hooked.watermarks == [30, 50]


def test_hooks_output_flows_downstream_before_the_watermark_and_end_of_stream_hook_runs_once():
    hooked = Hooked()
    app = application(lambda app: app.input("log.in").map(hooked).send_to("log.out"))
    driver = Driver(task_graph(app, [A0]))
    driver.source(A0, "a", 10)
    driver.tick()
    driver.end(A0)
    driver.end(A0)
    assert values(driver) == ["a", "wm 10", "the end"]
    assert hooked.watermarks == [10, MAX_WATERMARK]
    assert [e.timestamp for e in driver.collector.sent] == [10, 10, 10]


# --- windows ---------------------------------------------------------------------------------------


def windowed(window=None, lateness=0):
    return application(
        lambda app: (
            app.input(InputDescriptor("log.in", timestamp=lambda m: m["ts"]))
            .window(window or TumblingWindow(10), key=lambda m: m["k"], aggregate=Count(), allowed_lateness_ms=lateness)
            .send_to("log.out")
        )
    )


def test_a_window_fires_once_the_watermark_reaches_its_end_in_order_of_ends():
    driver = Driver(task_graph(windowed(), [A0]))
    for ts, key in [(1, "a"), (3, "b"), (5, "a"), (12, "a"), (9, "b")]:
        driver.source(A0, {"ts": ts, "k": key}, 0)
    driver.tick()  # watermark 12
    assert values(driver) == [WindowPane("a", 0, 10, 2), WindowPane("b", 0, 10, 2)]
    assert [e.timestamp for e in driver.collector.sent] == [9, 9]
    driver.source(A0, {"ts": 19, "k": "a"}, 0)
    driver.tick()  # watermark 19: [10, 20) not complete
    assert len(values(driver)) == 2
    driver.end(A0)
    assert values(driver)[2:] == [WindowPane("a", 10, 20, 2)]


def test_a_late_message_within_allowed_lateness_updates_its_pane_and_beyond_is_dropped():
    driver = Driver(task_graph(windowed(lateness=10), [A0]))
    driver.source(A0, {"ts": 2, "k": "a"}, 0)
    driver.source(A0, {"ts": 15, "k": "a"}, 0)
    driver.tick()  # watermark 15 fires [0, 10)
    driver.source(A0, {"ts": 4, "k": "a"}, 0)  # late, within lateness
    assert values(driver) == [WindowPane("a", 0, 10, 1), WindowPane("a", 0, 10, 2, update=True)]
    driver.source(A0, {"ts": 30, "k": "a"}, 0)
    driver.tick()  # watermark 30 purges [0, 10) (end + lateness = 20) and fires [10, 20)
    driver.source(A0, {"ts": 5, "k": "a"}, 0)  # beyond lateness
    window = driver.graph.graph.impls["window-0"]
    assert isinstance(window, WindowImpl) and window.late_dropped == 1
    assert values(driver)[2:] == [WindowPane("a", 10, 20, 1)]


def test_sliding_windows_emit_a_pane_for_every_window_an_event_falls_into():
    driver = Driver(task_graph(windowed(SlidingWindow(10, 5)), [A0]))
    driver.source(A0, {"ts": 7, "k": "a"}, 0)
    driver.end(A0)
    assert values(driver) == [WindowPane("a", 0, 10, 1), WindowPane("a", 5, 15, 1)]


# --- partition_by: the producing side --------------------------------------------------------------


def repartitioned(describe_downstream=None):
    def describe(app):
        stream = app.input(InputDescriptor("log.in", timestamp=lambda m: m["ts"])).partition_by(
            lambda m: m["user"], name="by-user"
        )
        (describe_downstream or (lambda s: s.send_to("log.out")))(stream)

    return application(describe)


def test_partition_by_writes_framed_user_messages_keyed_by_the_key_function():
    driver = Driver(task_graph(repartitioned(), [A0], stages=[0]))
    driver.source(A0, {"user": "u1", "ts": 5}, 0)
    (envelope,) = driver.collector.to(str(BY_USER))
    assert envelope.key == b'"u1"' and envelope.timestamp == 5
    assert unframe(envelope.message) == (MessageType.USER_MESSAGE, orjson.dumps({"user": "u1", "ts": 5}))


def test_every_producing_task_sends_watermarks_to_every_partition_and_end_of_stream_once():
    driver = Driver(task_graph(repartitioned(), [A0], stages=[0], partitions=3, producers=2))
    driver.source(A0, {"user": "u1", "ts": 5}, 0)
    driver.tick()
    assert controls(driver) == [
        (0, WatermarkMessage(5, "Partition 0", 2)),
        (1, WatermarkMessage(5, "Partition 0", 2)),
        (2, WatermarkMessage(5, "Partition 0", 2)),
    ]
    assert driver.coordinator.commits == 0, "a broadcast asks for no commit: commits follow task.commit.ms"
    driver.end(A0)
    assert controls(driver)[3:] == [], "end-of-stream waits for a flush of the task's output"
    assert driver.coordinator.commits == 1, "and asks for it at once (this collector cannot flush: a commit)"
    driver.checkpoint()
    assert controls(driver)[3:] == [(aggregate_partition(BY_USER.stream, 3), EndOfStreamMessage("Partition 0", 2))]


def test_end_of_stream_flushes_the_tasks_output_at_once_and_goes_out_without_waiting_for_a_tick_or_commit():
    """Issue 36: end-of-stream used to wait for the timer's flush (or the commit's), up to a timer interval per hop
    of end-of-stream latency; it comes once per run, so the task flushes for it at once. The commit after it
    finds it durable (its runtime flush came after the send), so nothing is left in flight or flushed again."""

    class FlushingCollector(Collector):
        flushes = 0

        def flush(self) -> None:
            self.flushes += 1

    driver = Driver(task_graph(repartitioned(), [A0], stages=[0], partitions=3, producers=2))
    driver.collector = collector = FlushingCollector()
    driver.source(A0, {"user": "u1", "ts": 5}, 0)
    driver.end(A0)
    assert collector.flushes == 1 and controls(driver)[-1][1] == EndOfStreamMessage("Partition 0", 2)
    assert driver.graph.control.in_flight and driver.coordinator.commits == 0, "in flight until the next flush"
    snapshot = driver.checkpoint()
    assert snapshot is not None and snapshot["in_flight"] == [] and collector.flushes == 1


def test_a_task_that_reads_no_stream_feeding_a_partition_by_is_not_its_producer():
    driver = Driver(task_graph(repartitioned(), [I1], task_name="Partition 1"))
    driver.tick()
    assert driver.collector.sent == []
    assert driver.graph.producing == set()


def test_aggregate_mode_defers_one_control_message_to_the_aggregate_partition_until_after_a_flush():
    settings = GraphSettings(aggregate=True)
    driver = Driver(task_graph(repartitioned(), [A0], stages=[0], partitions=4, settings=settings))
    driver.source(A0, {"user": "u1", "ts": 5}, 0)
    driver.tick()
    assert controls(driver) == [] and driver.coordinator.commits == 1
    driver.checkpoint()  # the commit: output flushed, then the deferred control message goes out
    target = aggregate_partition(BY_USER.stream, 4)
    assert controls(driver) == [(target, WatermarkMessage(5, "Partition 0", 2))]
    driver.tick()
    assert driver.coordinator.commits == 2, "one more commit flushes the control message itself"


def test_the_aggregating_task_rebroadcasts_reconciled_results_without_a_task_name():
    settings = GraphSettings(aggregate=True)
    target = aggregate_partition(BY_USER.stream, 4)
    own = BY_USER.partition(target)
    driver = Driver(task_graph(repartitioned(), [own], stages=[1], partitions=4, settings=settings))
    driver.control(own, WatermarkMessage(7, "Partition 0", 2))
    assert controls(driver) == []
    driver.control(own, WatermarkMessage(9, "Partition 1", 2))
    driver.control(own, EndOfStreamMessage("Partition 0", 2))
    driver.control(own, EndOfStreamMessage("Partition 1", 2))
    others = [p for p in range(4) if p != target]
    assert controls(driver) == [(p, WatermarkMessage(7, None, 0)) for p in others] + [
        (p, EndOfStreamMessage(None, 0)) for p in others
    ]
    assert driver.coordinator.ended == [own]


# --- partition_by: the consuming side --------------------------------------------------------------


def window_downstream(stream):
    stream.window(TumblingWindow(10), key=lambda kv: kv.key, aggregate=Collect(lambda kv: kv.value["n"])).send_to(
        "log.out"
    )


def test_window_outputs_fire_exactly_when_the_minimum_upstream_watermark_passes_their_end():
    driver = Driver(task_graph(repartitioned(window_downstream), [I0], stages=[1], producers=2))
    for n, ts in enumerate([1, 8, 12, 18, 25]):
        driver.user(I0, "u", {"n": n}, ts)
    driver.control(I0, WatermarkMessage(30, "Partition 0", 2))
    assert values(driver) == [], "one producer alone does not move the watermark"
    driver.control(I0, WatermarkMessage(9, "Partition 1", 2))
    assert values(driver) == [], "minimum 9 has not reached the end 10"
    driver.control(I0, WatermarkMessage(10, "Partition 1", 2))
    assert values(driver) == [WindowPane("u", 0, 10, [0, 1])]
    driver.control(I0, WatermarkMessage(19, "Partition 1", 2))
    assert values(driver)[1:] == []
    driver.control(I0, WatermarkMessage(20, "Partition 1", 2))
    assert values(driver)[1:] == [WindowPane("u", 10, 20, [2, 3])]
    driver.control(I0, EndOfStreamMessage("Partition 0", 2))
    assert values(driver)[2:] == [], "Partition 1 still holds the watermark at 20"
    driver.control(I0, EndOfStreamMessage("Partition 1", 2))
    assert values(driver)[2:] == [WindowPane("u", 20, 30, [4])]
    assert driver.coordinator.ended == [I0]


def test_user_messages_of_an_ended_intermediate_partition_are_ignored():
    driver = Driver(task_graph(repartitioned(), [I0, I1], stages=[1], producers=1))
    driver.control(I0, EndOfStreamMessage("Partition 0", 1))
    driver.user(I0, "u", {"late": True}, 1)
    driver.user(I1, "u", {"n": 1}, 1)
    assert values(driver) == [{"n": 1}]


def test_watermarks_flow_through_a_repartitioning_as_in_samzas_watermark_integration_test():
    """Source watermarks p0: 1, 4 and p1: 2, 3 → partition_by watermark 4 in task 0 and 3 in task 1 →
    every downstream task sees min = 3."""
    seen: dict[str, list[int]] = {"Partition 0": [], "Partition 1": []}

    class Recorder:
        def __init__(self, task):
            self.task = task

        def __call__(self, m, collector, coordinator):
            pass

        def on_watermark(self, watermark):
            seen[self.task].append(watermark)

    app = repartitioned()
    producers = [
        Driver(task_graph(app, [A0], task_name="Partition 0", stages=[0])),
        Driver(task_graph(app, [A1], task_name="Partition 1", stages=[0])),
    ]
    for driver, ssp, times in ((producers[0], A0, (1, 4)), (producers[1], A1, (2, 3))):
        for ts in times:
            driver.source(ssp, {"user": f"u{ts}", "ts": ts}, 0)
            driver.tick()
    assert [p.graph.graph.impls["by-user"].input_watermark for p in producers] == [4, 3]

    def sink_app(app):
        app.input(InputDescriptor("log.in", timestamp=lambda m: m["ts"])).partition_by(
            lambda m: m["user"], name="by-user"
        ).sink(Recorder("?"))

    consumers = {}
    for partition, task in ((0, "Partition 0"), (1, "Partition 1")):
        graph = task_graph(application(sink_app), [BY_USER.partition(partition)], task_name=task, stages=[1])
        sink = graph.graph.impls["sink-0"]
        sink._on_watermark = Recorder(task).on_watermark
        consumers[partition] = Driver(graph)
    for producer in producers:
        for partition, envelopes in route(producer.collector.take(), 2).items():
            for envelope in envelopes:
                consumers[partition].deliver(envelope, partition)
    # task 0's messages arrive first (its watermarks 1, 4), then task 1's (2, 3): min(4, 2), then min(4, 3)
    assert seen == {"Partition 0": [2, 3], "Partition 1": [2, 3]}


def test_merge_of_a_source_and_an_intermediate_stream_runs_in_the_later_stage():
    def describe(app):
        a = app.input("log.in")
        b = app.input("log.b")
        a.partition_by(lambda m: m, name="by-user").map(lambda kv: kv.value).merge(b).send_to("log.out")

    app = application(describe)
    assert app.stage_count == 2
    run = app.run_set([1])
    assert [spec.op_id for spec in run.source_inputs] == ["input-log.b"]
    b0 = SystemStream("log", "b").partition(0)
    driver = Driver(task_graph(app, [I0, b0], stages=[1], producers=1))
    driver.source(b0, "from b", 1)
    driver.user(I0, "k", "from a", 1)
    assert values(driver) == ["from b", "from a"]


def test_a_kv_carries_key_and_value_across_the_repartitioning():
    driver = Driver(task_graph(repartitioned(), [I0], stages=[1], producers=1))
    driver.user(I0, "u1", {"n": 1}, 1)
    ((key, value),) = [(e.key, e.message) for e in driver.collector.sent]
    assert (key, value) == ("u1", {"n": 1})
    assert isinstance(KV("u1", 1), tuple)


def test_tasks_of_other_partitions_are_untouched_by_a_partitions_end():
    driver = Driver(task_graph(repartitioned(), [I0, I1], stages=[1], producers=1))
    driver.control(I0, EndOfStreamMessage("Partition 0", 1))
    assert driver.coordinator.ended == [I0]
    assert not driver.graph.graph.inputs[BY_USER].ended
    driver.control(I1, EndOfStreamMessage("Partition 0", 1))
    assert driver.graph.graph.inputs[BY_USER].ended
    assert driver.coordinator.ended == [I0, I1]


def test_only_watermarks_of_ssps_of_this_task_count():
    driver = Driver(task_graph(repartitioned(), [I0], stages=[1], producers=1))
    driver.control(I0, WatermarkMessage(5, "Partition 0", 1))
    assert driver.graph.task_watermark == 5
    assert SystemStreamPartition("log", "app-1-by-user", 1) not in driver.graph.ssps


def test_a_value_the_partition_by_serde_cannot_encode_fails_naming_the_operator_and_stream():
    from millstream.operators.graph_task import IntermediateSerdeError

    app = application(
        lambda app: (
            app.input("log.in")
            .window(TumblingWindow(10), aggregate=Count())
            .partition_by(lambda pane: pane.start, name="by-user")
            .send_to("log.out")
        )
    )
    driver = Driver(task_graph(app, [A0], stages=[0]))
    driver.source(A0, "x", 1)
    with pytest.raises(IntermediateSerdeError, match=r"partition_by 'by-user' cannot serialize .*'log\.app-1-by-user'"):
        driver.end(A0)


def test_an_idle_producer_stops_holding_the_window_back_once_its_timeout_passed():
    clock = [100.0]
    settings = GraphSettings(idle_timeout_ms=1000, quorum_percentage=0.5)
    graph = task_graph(repartitioned(window_downstream), [I0], stages=[1], settings=settings, clock=lambda: clock[0])
    driver = Driver(graph)
    driver.user(I0, "u", {"n": 1}, 3)
    driver.control(I0, WatermarkMessage(15, "Partition 0", 2))
    driver.tick()
    assert values(driver) == [], "Partition 1 has not been silent long enough"
    clock[0] += 1.5
    driver.tick()
    assert values(driver) == [WindowPane("u", 0, 10, [1])]


def test_measurements_give_each_input_partitions_and_operators_watermark_in_seconds():
    hooked = Hooked()
    app = application(
        lambda app: app.input(InputDescriptor("log.in", max_out_of_orderness_ms=5)).map(hooked).sink(lambda *a: None)
    )
    driver = Driver(task_graph(app, [A0, A1]))
    assert driver.graph.measurements() == []  # no event time seen: no watermark to show yet
    driver.source(A0, "a", 100_000)
    driver.source(A1, "b", 40_000)
    driver.tick()

    measured = {(name, tuple(sorted(labels.items()))): value for name, _, labels, value in driver.graph.measurements()}
    inputs = {
        labels: value for (name, labels), value in measured.items() if name == "input_watermark_timestamp_seconds"
    }
    assert inputs == {
        (("partition", "0"), ("stream", "in"), ("system", "log")): 99.995,
        (("partition", "1"), ("stream", "in"), ("system", "log")): 39.995,
    }
    operators = {
        labels: value for (name, labels), value in measured.items() if name != "input_watermark_timestamp_seconds"
    }
    assert len(operators) == len(driver.graph.graph.operators) >= 3
    assert set(operators.values()) == {39.995}  # the minimum of the partitions feeding them
