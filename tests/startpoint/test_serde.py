from dataclasses import dataclass

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.contracts.startpoints import (
    StartpointCustom,
    StartpointOldest,
    StartpointSpecific,
    StartpointTimestamp,
    StartpointUpcoming,
    register_startpoint_type,
)
from millstream.model import SystemStreamPartition as SSP
from millstream.startpoint.errors import StartpointFormatError
from millstream.startpoint.serde import (
    fan_out_from_bytes,
    fan_out_to_bytes,
    startpoint_from_bytes,
    startpoint_to_bytes,
)


def test_json_has_samzas_shape_for_every_generic_type():
    assert orjson.loads(startpoint_to_bytes(StartpointSpecific("42", creation_timestamp=1690000000000))) == {
        "@type": "StartpointSpecific",
        "creationTimestamp": 1690000000000,
        "specificOffset": "42",
    }
    assert orjson.loads(startpoint_to_bytes(StartpointTimestamp(1689999999000, creation_timestamp=5))) == {
        "@type": "StartpointTimestamp",
        "creationTimestamp": 5,
        "timestampOffset": 1689999999000,
    }
    assert orjson.loads(startpoint_to_bytes(StartpointOldest(creation_timestamp=7))) == {
        "@type": "StartpointOldest",
        "creationTimestamp": 7,
    }


def test_a_record_written_by_samza_is_read():
    data = b'{"@type":"StartpointSpecific","creationTimestamp":1690000000000,"specificOffset":"42"}'
    assert startpoint_from_bytes(data) == StartpointSpecific("42", creation_timestamp=1690000000000)


startpoints = st.one_of(
    st.builds(StartpointSpecific, st.text(min_size=1), creation_timestamp=st.integers(0, 2**53)),
    st.builds(StartpointTimestamp, st.integers(0, 2**53), creation_timestamp=st.integers(0, 2**53)),
    st.builds(StartpointOldest, creation_timestamp=st.integers(0, 2**53)),
    st.builds(StartpointUpcoming, creation_timestamp=st.integers(0, 2**53)),
)


@given(startpoints)
def test_every_startpoint_round_trips(startpoint):
    assert startpoint_from_bytes(startpoint_to_bytes(startpoint)) == startpoint


@given(st.dictionaries(st.integers(0, 50).map(lambda p: SSP("log", "a.b", p)), startpoints, min_size=1))
def test_fan_out_record_round_trips(fan_outs):
    assert fan_out_from_bytes(fan_out_to_bytes(123, fan_outs), "t") == (123, fan_outs)


@register_startpoint_type
@dataclass(frozen=True)
class StartpointShardSequence(StartpointCustom):
    shard_id: str
    sequence_number: str


def test_registered_custom_type_round_trips_under_its_type_name():
    startpoint = StartpointShardSequence("shardId-1", "4959", creation_timestamp=9)
    document = orjson.loads(startpoint_to_bytes(startpoint))
    assert document == {
        "@type": "StartpointShardSequence",
        "creationTimestamp": 9,
        "shardId": "shardId-1",
        "sequenceNumber": "4959",
    }
    assert startpoint_from_bytes(startpoint_to_bytes(startpoint)) == startpoint


@pytest.mark.parametrize(
    "data",
    [b"not json", b"[]", b'{"@type":"StartpointMoon","creationTimestamp":1}', b'{"@type":"StartpointSpecific"}'],
)
def test_malformed_records_raise_a_format_error(data):
    with pytest.raises(StartpointFormatError):
        startpoint_from_bytes(data, "startpoint 'x'")
