"""``task.process.errors=dead-letter`` on the real broker: the failing messages' original bytes reach the Kafka
dead-letter topic with ``millstream.error.*`` headers naming where they came from and what was raised, and the
output holds every other message exactly once."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from millstream.coordinator.job_result import JobResult
from millstream.testing import InProcessRunner
from tests.helpers import wait_until
from tests.integration.kafka.helpers import create_topic, job_config, produce_numbers, read_all

pytestmark = pytest.mark.integration


def test_dead_letter_on_kafka_keeps_the_original_bytes_with_headers_and_the_output_loses_nothing(
    tmp_path: Path, bootstrap: str, topic_name: Any
) -> None:
    source, out, dead = topic_name("in"), topic_name("out"), topic_name("dead")
    for topic in (source, out, dead):
        create_topic(bootstrap, topic, 2 if topic == source else 1)
    written = produce_numbers(bootstrap, source, 2, 10)
    config = job_config(
        bootstrap,
        tmp_path,
        source,
        out,
        task__class="tests.integration.kafka.jobs:KafkaFailingOnSome",
        test__fail__values="3,7",
        task__process__errors="dead-letter",
        task__dead__letter__stream=f"kafka.{dead}",
    )
    runner = InProcessRunner(config)
    result: dict[str, JobResult] = {}
    thread = threading.Thread(target=lambda: result.setdefault("r", runner.run(timeout=120)), daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: len(read_all(bootstrap, out, 1)) >= 16 and len(read_all(bootstrap, dead, 1)) >= 4,
            90,
            "16 outputs and 4 dead letters",
            interval=0.5,
        )
    finally:
        runner.request_stop()
        thread.join(60)
    assert result["r"].outcome == "stopped", result["r"].error

    origins = [orjson.loads(message.value()) for message in read_all(bootstrap, out, 1)]
    assert sorted((o["p"], o["v"]) for o in origins) == sorted(w for w in written if w[1] not in (3, 7))
    letters = read_all(bootstrap, dead, 1)
    assert sorted(message.value() for message in letters) == [b"3", b"3", b"7", b"7"]
    headers = {
        (found["millstream.error.partition"], message.value()): found
        for message in letters
        for found in [dict(message.headers() or [])]
    }
    seven = headers[(b"1", b"7")]
    assert seven["millstream.error.task"] == b"Partition 1"
    assert seven["millstream.error.stream"] == f"kafka.{source}".encode()
    assert seven["millstream.error.offset"] == b"7"
    assert (seven["millstream.error.type"], seven["millstream.error.message"]) == (b"ValueError", b"cannot handle 7")
    assert seven["millstream.error.traceback.digest"] == headers[(b"0", b"7")]["millstream.error.traceback.digest"]
