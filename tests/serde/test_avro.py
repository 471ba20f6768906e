"""Plain Avro: records round-trip through the schema from config, and anything that is not a record of that
schema (a value that does not fit, foreign bytes, a registry-framed value) is a SerdeError, never a wrong record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from millstream.config.settings import Settings
from millstream.errors import ConfigError
from millstream.model import SystemStream
from millstream.serde.avro import AvroSerde
from millstream.serde.base import SerdeError
from millstream.serde.registry import SerdeRegistry

SCHEMA = {
    "type": "record",
    "name": "PageView",
    "namespace": "shop",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
    ],
}
STREAM = SystemStream("log", "views")


def avro_serde(**settings: str) -> AvroSerde:
    values = {"serializers.registry.pv.class": "avro", "systems.log.streams.views.samza.msg.serde": "pv"}
    values.update({f"serializers.registry.pv.{key.replace('__', '.')}": value for key, value in settings.items()})
    serde = SerdeRegistry.from_config(Settings(values)).msg_serde(STREAM)
    assert isinstance(serde, AvroSerde)
    return serde


records = st.fixed_dictionaries(
    {
        "user": st.text(),
        "ts": st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "referrer": st.none() | st.text(),
    }
)


@given(records)
def test_every_record_of_the_schema_round_trips(record: dict) -> None:
    serde = AvroSerde(__import__("fastavro").parse_schema(SCHEMA), "pv")
    assert serde.from_bytes(serde.to_bytes(record)) == record


def test_the_schema_comes_inline_or_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "pageview.avsc"
    path.write_text(json.dumps(SCHEMA))
    record = {"user": "ada", "ts": 7, "referrer": None}
    inline = avro_serde(schema=json.dumps(SCHEMA))
    from_file = avro_serde(schema__path=str(path))
    assert from_file.from_bytes(inline.to_bytes(record)) == record


def test_a_value_that_does_not_fit_the_schema_is_a_serde_error_naming_serde_and_schema() -> None:
    serde = avro_serde(schema=json.dumps(SCHEMA))
    with pytest.raises(SerdeError, match=r"avro serde 'pv'.*shop.PageView"):
        serde.to_bytes({"user": "ada"})


@pytest.mark.parametrize(
    "data",
    [b"", b"\x06ada", b"\x00\x00\x00\x00\x01\x06ada\x0e\x00"],
    ids=["empty", "truncated", "registry-framed"],
)
def test_bytes_that_are_not_one_record_of_the_schema_are_a_serde_error(data: bytes) -> None:
    serde = avro_serde(schema=json.dumps(SCHEMA))
    with pytest.raises(SerdeError, match="avro serde 'pv'"):
        serde.from_bytes(data)


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({}, "set serializers.registry.pv.schema"),
        ({"schema": "{not json"}, "not a valid Avro schema"),
        ({"schema": '{"type": "nosuch"}'}, "not a valid Avro schema"),
        ({"schema": json.dumps(SCHEMA), "schema__path": "/x.avsc"}, "set one of them, not both"),
        ({"schema__path": "/no/such/file.avsc"}, "cannot read the schema"),
        ({"schema": json.dumps(SCHEMA), "subject.name.strategy": "Topic"}, "subject.name.strategy"),
        ({"schema": json.dumps(SCHEMA), "schemas": "x"}, "unknown config key 'serializers.registry.pv.schemas'"),
    ],
)
def test_bad_settings_stop_the_job_naming_the_key(settings: dict[str, str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        avro_serde(**settings)


def test_a_serde_without_settings_refuses_them() -> None:
    config = Settings({"serializers.registry.j.class": "json", "serializers.registry.j.schema": "{}"})
    with pytest.raises(ConfigError, match="serde 'json' takes no settings"):
        SerdeRegistry.from_config(config)
