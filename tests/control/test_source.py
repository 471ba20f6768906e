"""Source watermarks from event times with bounded out-of-orderness."""

from millstream.control.messages import MAX_WATERMARK, MIN_WATERMARK
from millstream.control.source import SourceWatermarks
from millstream.model import SystemStreamPartition

A0 = SystemStreamPartition("log", "in", 0)
A1 = SystemStreamPartition("log", "in", 1)


def test_watermark_is_the_newest_event_time_minus_the_allowed_out_of_orderness():
    marks = SourceWatermarks(100, [A0])
    marks.observe(A0, 1000)
    marks.observe(A0, 900)
    assert marks.watermark(A0) == 900
    marks.observe(A0, 1500)
    assert marks.watermark(A0) == 1400


def test_a_partition_without_messages_holds_the_stream_watermark_back():
    marks = SourceWatermarks(0, [A0, A1])
    marks.observe(A0, 1000)
    assert marks.watermark(A1) == MIN_WATERMARK
    assert marks.stream_watermark() == MIN_WATERMARK


def test_an_ended_partition_no_longer_holds_the_stream_watermark_back():
    marks = SourceWatermarks(0, [A0, A1])
    marks.observe(A0, 1000)
    marks.end(A1)
    assert marks.watermark(A1) == MAX_WATERMARK
    assert marks.stream_watermark() == 1000


def test_event_time_progress_survives_a_snapshot():
    marks = SourceWatermarks(10, [A0, A1])
    marks.observe(A0, 500)
    marks.end(A1)
    restored = SourceWatermarks(10, [A0, A1])
    restored.restore(marks.snapshot())
    assert (restored.watermark(A0), restored.watermark(A1)) == (490, MAX_WATERMARK)


# --- window boundaries -------------------------------------------------------------------------------


def test_observe_reports_only_advances_that_pass_a_window_boundary():
    marks = SourceWatermarks(100, [A0], boundary_ms=1000)
    assert marks.observe(A0, 500), "the first event time: from no watermark to one"
    assert not marks.observe(A0, 1099), "watermark 999: no boundary passed"
    assert not marks.observe(A0, 900), "an older event time moves nothing"
    assert marks.observe(A0, 1100), "watermark 1000: the end of [0, 1000)"
    assert not SourceWatermarks(0, [A0]).observe(A0, 5000), "no boundary configured"


def test_the_stream_advances_at_a_boundary_only_once_its_slowest_partition_passed_it():
    marks = SourceWatermarks(0, [A0, A1], boundary_ms=1000)
    marks.observe(A0, 100)
    marks.observe(A1, 200)
    assert marks.boundary_advance() == 100
    marks.observe(A0, 1500)
    assert marks.boundary_advance() is None, "A1 still holds the stream in the first window"
    marks.observe(A1, 1200)
    assert marks.boundary_advance() == 1200
    assert marks.boundary_advance() is None, "handed out once"


def test_a_timer_advance_counts_so_the_same_boundary_is_not_handed_out_again():
    marks = SourceWatermarks(0, [A0], boundary_ms=1000)
    marks.observe(A0, 1500)
    assert marks.advance() == 1500
    marks.observe(A0, 1800)
    assert marks.boundary_advance() is None
    marks.observe(A0, 2000)
    assert marks.boundary_advance() == 2000
