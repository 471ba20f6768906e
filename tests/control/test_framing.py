"""The intermediate wire format: ``[type byte][payload]``, control payloads as JSON."""

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.control.errors import FramingError
from millstream.control.framing import MessageType, frame_control_message, frame_user_message, unframe
from millstream.control.messages import EndOfStreamMessage, WatermarkMessage

task_names = st.none() | st.text(min_size=1, max_size=20)
timestamps = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def test_type_bytes_are_samzas_message_type_ordinals():
    assert frame_user_message(b"x")[0] == 0
    assert frame_control_message(WatermarkMessage(5, "Partition 0", 2))[0] == 1
    assert frame_control_message(EndOfStreamMessage("Partition 0", 2))[0] == 2


@given(st.binary())
def test_a_user_payload_round_trips_unchanged(payload):
    assert unframe(frame_user_message(payload)) == (MessageType.USER_MESSAGE, payload)


@given(timestamps, task_names, st.integers(min_value=1, max_value=10_000))
def test_a_watermark_round_trips(timestamp, task_name, count):
    message = WatermarkMessage(timestamp, task_name, count if task_name is not None else 0)
    assert unframe(frame_control_message(message)) == (MessageType.WATERMARK, message)


@given(task_names, st.integers(min_value=1, max_value=10_000))
def test_an_end_of_stream_round_trips(task_name, count):
    message = EndOfStreamMessage(task_name, count if task_name is not None else 0)
    assert unframe(frame_control_message(message)) == (MessageType.END_OF_STREAM, message)


def test_control_payload_is_json_with_version_task_name_and_task_count():
    frame = frame_control_message(WatermarkMessage(42, "Partition 3", 4))
    assert orjson.loads(frame[1:]) == {"version": 1, "taskName": "Partition 3", "taskCount": 4, "timestamp": 42}


def test_samzas_hyphenated_field_names_are_accepted():
    payload = orjson.dumps({"version": 1, "task-name": "t1", "task-count": 2})
    assert unframe(bytes([2]) + payload) == (MessageType.END_OF_STREAM, EndOfStreamMessage("t1", 2))


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (b"", "empty record"),
        (b"\x07abc", "unknown message type byte 7"),
        (b"\x01not json", "not JSON"),
        (b"\x01[1,2]", "not a JSON object"),
        (b'\x02{"taskName": "t0"}', "needs a positive taskCount"),
        (b'\x01{"taskName": "t0", "taskCount": 1}', "integer timestamp"),
        (b'\x01{"taskName": 3, "taskCount": 1, "timestamp": 1}', "taskName must be a string"),
        ("text", "got str"),
    ],
)
def test_a_malformed_record_is_refused_naming_where_it_was_read(record, problem):
    with pytest.raises(FramingError, match=f"offset 7 of stream 'log.s' partition 1: .*{problem}"):
        unframe(record, "offset 7 of stream 'log.s' partition 1")
