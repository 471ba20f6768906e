"""Describing applications: the graph, operator ids and names, windows and aggregators."""

import pytest

from millstream.api.application import (
    InputDescriptor,
    OutputDescriptor,
    StreamApplication,
    StreamApplicationDescriptor,
    describe_application,
)
from millstream.api.errors import ApplicationError
from millstream.api.specs import InputSpec, MapSpec, MergeSpec, PartitionBySpec, SendToSpec, WindowSpec
from millstream.api.stream import MessageStream
from millstream.api.windows import Aggregate, Collect, Count, SlidingWindow, Sum, TumblingWindow
from millstream.errors import ConfigError


def test_operators_get_ids_by_kind_and_order_unless_named():
    app = StreamApplicationDescriptor()
    stream = app.input("log.in").map(str).map(len, name="lengths").filter(bool)
    stream.window(TumblingWindow(10), aggregate=Count()).send_to("log.out")
    assert [op.op_id for op in app.graph.operators] == [
        "input-log.in",
        "map-0",
        "lengths",
        "filter-0",
        "window-0",
        "send_to-0",
    ]
    assert [type(op) for op in app.graph.operators][:2] == [InputSpec, MapSpec]
    assert isinstance(app.graph.operators[-2], WindowSpec)


def test_each_operator_links_to_its_inputs():
    app = StreamApplicationDescriptor()
    a, b = app.input("log.a"), app.input("log.b")
    merged = a.merge(b).partition_by(lambda m: m, name="by-value")
    merged.send_to(OutputDescriptor("log.out", msg_serde="json"))
    merge, partition, send = app.graph.operators[2:]
    assert isinstance(merge, MergeSpec) and merge.inputs == (a.spec, b.spec)
    assert isinstance(partition, PartitionBySpec) and partition.inputs == (merge,)
    assert isinstance(send, SendToSpec) and send.output.msg_serde == "json"


def test_a_stream_can_be_an_input_only_once():
    app = StreamApplicationDescriptor()
    app.input("log.in")
    with pytest.raises(ApplicationError, match=r"'log\.in' is already an input"):
        app.input(InputDescriptor("in"))


def test_operator_names_must_be_unique_and_usable_in_stream_names():
    app = StreamApplicationDescriptor()
    stream = app.input("log.in")
    stream.partition_by(lambda m: m, name="by-user")
    with pytest.raises(ApplicationError, match="named 'by-user'"):
        stream.partition_by(lambda m: m, name="by-user")
    with pytest.raises(ApplicationError, match="'by user' must start"):
        stream.partition_by(lambda m: m, name="by user")


def test_application_errors_are_config_errors_so_the_job_does_not_start():
    assert issubclass(ApplicationError, ConfigError)


def test_an_application_without_inputs_is_refused():
    class Empty(StreamApplication):
        def describe(self, app):
            pass

    with pytest.raises(ApplicationError, match="Empty describes no input"):
        describe_application(Empty())


def test_merging_streams_of_two_applications_is_refused():
    first, second = StreamApplicationDescriptor(), StreamApplicationDescriptor()
    with pytest.raises(ApplicationError, match="another application"):
        MessageStream.merge_all([first.input("log.a"), second.input("log.b")])


def test_join_accepts_inner_or_left_only():
    from millstream.api.table import InMemoryTableDescriptor

    app = StreamApplicationDescriptor()
    with pytest.raises(ApplicationError, match="how must be 'inner' or 'left'"):
        app.input("log.in").join(InMemoryTableDescriptor("t"), key=str, joiner=lambda m, r: m, how="outer")


def test_tumbling_windows_are_aligned_to_the_epoch_for_negative_times_too():
    window = TumblingWindow(10)
    assert window.assign(0) == [(0, 10)]
    assert window.assign(19) == [(10, 20)]
    assert window.assign(-1) == [(-10, 0)]


def test_sliding_windows_hold_an_event_in_size_over_slide_windows():
    window = SlidingWindow(30, 10)
    assert window.assign(25) == [(0, 30), (10, 40), (20, 50)]
    assert window.assign(30) == [(10, 40), (20, 50), (30, 60)]
    assert SlidingWindow(10, 10).assign(5) == [(0, 10)]


@pytest.mark.parametrize(("size", "slide"), [(0, 1), (10, 0), (10, 20)])
def test_malformed_windows_are_refused(size, slide):
    with pytest.raises(ValueError, match="sliding window"):
        SlidingWindow(size, slide)


def test_aggregators_fold_messages():
    def fold(aggregator, messages):
        accumulator = aggregator.initial()
        for message in messages:
            accumulator = aggregator.add(accumulator, message)
        return aggregator.result(accumulator)

    assert fold(Count(), "abc") == 3
    assert fold(Sum(len), ["ab", "c"]) == 3
    assert fold(Collect(str.upper), "ab") == ["A", "B"]
    assert (
        fold(Aggregate(lambda: (0, 0), lambda acc, m: (acc[0] + m, acc[1] + 1), lambda acc: acc[0] / acc[1]), [1, 3])
        == 2
    )
