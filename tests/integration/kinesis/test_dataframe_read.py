"""Format ``millstream`` over Kinesis: shards come and go, so a read is refused by name, never half done."""

from __future__ import annotations

from pathlib import Path

import pytest

from millstream.model import SystemStream
from millstream.spark.stream_read import StreamReadError, plan_ranges
from tests.integration.kinesis.helpers import create_stream, kinesis_config

pytestmark = pytest.mark.integration


def test_a_kinesis_stream_is_refused_naming_it_rather_than_read_in_part(kinesis_endpoint, stream_name, tmp_path: Path):
    stream = stream_name("views")
    create_stream(kinesis_endpoint, stream, 2)
    config = kinesis_config(kinesis_endpoint, tmp_path)
    with pytest.raises(StreamReadError, match=rf"kinesis\.{stream}.*come and go"):
        plan_ranges(config, SystemStream("kinesis", stream), None, None)
