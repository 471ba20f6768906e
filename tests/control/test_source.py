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
