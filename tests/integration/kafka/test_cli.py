"""The ``millstream`` command with Kafka: stream tools on topics, and a job that cannot start because the
brokers are unreachable or an input topic is missing (a clear error, in bounded time, non-zero exit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.cli.test_main import SECRET, millstream
from tests.integration.processes import free_port

pytestmark = pytest.mark.integration


def write_config(tmp_path: Path, bootstrap: str, **values: Any) -> Path:
    config = {
        "job.name": f"cli-{tmp_path.name}",
        "job.data.dir": str(tmp_path / "data"),
        "task.class": "tests.integration.kafka.jobs:KafkaPassThrough",
        "task.inputs": "kafka.in",
        "task.checkpoint.factory": "kafka",
        "metadata.store.factory": "kafka",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.bootstrap.servers": bootstrap,
        "systems.kafka.samza.msg.serde": "string",
        "sensitive.systems.kafka.consumer.sasl.password": SECRET,
        "spark.ui.enabled": "false",
        "test.output": "out",
    }
    config.update({key.replace("__", "."): value for key, value in values.items()})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def test_streams_create_describe_produce_consume_list_and_delete_a_topic(tmp_path, bootstrap, topic_name):
    path = write_config(tmp_path, bootstrap)
    topic = topic_name("cli")
    created = millstream("streams", "create", path, f"kafka.{topic}", "--partitions", "3")
    assert created.returncode == 0, created.stderr
    assert f"created: kafka.{topic} (3 partitions)" in created.stdout
    assert f"kafka.{topic}" in millstream("streams", "list", path, "--system", "kafka").stdout.split()

    produced = millstream("streams", "produce", path, f"kafka.{topic}", "--partition", "1", stdin="a\nb\nc\n")
    assert produced.returncode == 0, produced.stderr
    described = millstream("streams", "describe", path, f"kafka.{topic}")
    assert described.returncode == 0, described.stderr
    assert f"kafka.{topic}: 3 partition(s)" in described.stdout
    consumed = millstream("streams", "consume", path, f"kafka.{topic}")
    assert consumed.returncode == 0, consumed.stderr
    records = [orjson.loads(line) for line in consumed.stdout.splitlines()]
    assert [{k: r[k] for k in ("partition", "offset", "key", "value")} for r in records] == [
        {"partition": 1, "offset": str(offset), "key": None, "value": value} for offset, value in enumerate("abc")
    ]
    assert all(r["timestamp"] > 0 for r in records)
    sealed = millstream("streams", "seal", path, f"kafka.{topic}")
    assert sealed.returncode != 0 and "no bounded streams" in sealed.stderr

    deleted = millstream("streams", "delete", path, f"kafka.{topic}")
    assert deleted.returncode == 0 and f"deleted: kafka.{topic}" in deleted.stdout
    gone = millstream("streams", "describe", path, f"kafka.{topic}")
    assert gone.returncode == 2 and f"stream 'kafka.{topic}' does not exist" in gone.stderr


@pytest.mark.parametrize("mode", ["--in-process", "spark"])
def test_a_job_whose_brokers_are_unreachable_fails_quickly_naming_them(tmp_path, mode):
    address = f"127.0.0.1:{free_port()}"
    path = write_config(tmp_path, address, systems__kafka__startup__timeout__ms=2000)
    result = millstream("run", path, *([mode] if mode.startswith("--") else []))
    assert result.returncode == 1, result.stderr
    assert f"no broker at {address} answered within 2s" in result.stderr  # the configured timeout ended it


@pytest.mark.parametrize("mode", ["--in-process", "spark"])
def test_a_job_whose_input_topic_is_missing_exits_2_naming_it(tmp_path, bootstrap, topic_name, mode):
    topic = topic_name("missing")
    path = write_config(tmp_path, bootstrap, task__inputs=f"kafka.{topic}")
    result = millstream("run", path, *([mode] if mode.startswith("--") else []))
    assert result.returncode == 2, result.stderr
    assert f"stream 'kafka.{topic}' does not exist" in result.stderr
