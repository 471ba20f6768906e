"""Jobs the Kinesis system cannot run, and Kinesis settings that are wrong: clear config errors (exit code 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.connectors.kinesis.config import KinesisClients
from millstream.coordinator.job_coordinator import JobCoordinator
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from tests.integration.kinesis.helpers import SYSTEM, create_stream
from tests.integration.kinesis.jobs_support import job_config

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def stream(kinesis_endpoint, stream_name):
    name = stream_name()
    create_stream(kinesis_endpoint, name, 1)
    return name


def plan(config: Settings) -> None:
    JobCoordinator(config, metadata_store(config)).plan()


def test_a_kinesis_job_with_a_stateful_store_is_refused(kinesis_endpoint, tmp_path, stream):
    config = job_config(kinesis_endpoint, tmp_path, stream, stores__counts__factory="inmemory")
    with pytest.raises(ConfigError, match=r"'stores\.counts\.factory'.*cannot have stateful stores") as raised:
        plan(config)
    assert raised.value.exit_code == 2


def test_a_kinesis_broadcast_input_is_refused(kinesis_endpoint, tmp_path, stream):
    config = job_config(kinesis_endpoint, tmp_path, stream, task__broadcast__inputs=f"{SYSTEM}.{stream}#0")
    with pytest.raises(ConfigError, match=rf"'task.broadcast.inputs'.*'{SYSTEM}.{stream}' cannot be a broadcast"):
        plan(config)


def test_a_kinesis_bootstrap_stream_is_refused(kinesis_endpoint, tmp_path, stream):
    key = f"systems.{SYSTEM}.streams.{stream}.samza.bootstrap"
    config = job_config(kinesis_endpoint, tmp_path, stream).with_overrides({key: "true"})
    with pytest.raises(ConfigError, match=rf"'{key}'.*cannot be a bootstrap stream"):
        plan(config)


def test_kinesis_inputs_mixed_with_another_system_s_inputs_are_refused(kinesis_endpoint, tmp_path, stream):
    config = job_config(kinesis_endpoint, tmp_path, stream, task__inputs=f"{SYSTEM}.{stream},log.out")
    with pytest.raises(ConfigError, match=r"'task.inputs'.*cannot be mixed with inputs of other systems \('log.out'\)"):
        plan(config)


def test_a_plain_kinesis_job_plans_one_slot_per_shard_per_container(kinesis_endpoint, tmp_path, stream):
    config = job_config(kinesis_endpoint, tmp_path, stream, job__container__count=2)
    model = JobCoordinator(config, metadata_store(config)).plan().model
    assert {
        cid: sorted(ssp.partition for t in c.tasks.values() for ssp in t.ssps) for cid, c in model.containers.items()
    } == {
        "0": [0],
        "1": [1],
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("systems.kinesis.aws.secretKey", "s3cr3t", r"must not hold a secret in plain config.*sensitive\."),
        ("systems.kinesis.consumer.initial.position", "OLDEST", r"consumer.initial.position' has invalid value"),
        (
            "systems.kinesis.consumer.initial.position",
            "AT_TIMESTAMP",
            r"set 'systems.kinesis.consumer.initial.timestamp'",
        ),
        (
            "systems.kinesis.consumer.initial.timestamp",
            "yesterday",
            r"initial.timestamp' has invalid value 'yesterday'",
        ),
        ("systems.kinesis.consumer.lease.duration.ms", "5", r"lease.duration.ms' has invalid value '5'"),
        ("systems.kinesis.no.such.key", "1", r"unknown config key 'systems.kinesis.no.such.key'.*aws.region"),
    ],
)
def test_wrong_kinesis_settings_are_config_errors_naming_the_key(
    kinesis_endpoint, tmp_path, stream, key, value, message
):
    config = job_config(kinesis_endpoint, tmp_path, stream).with_overrides({key: value})
    with pytest.raises(ConfigError, match=message) as raised:
        prepare(config)
        KinesisClients(config, SYSTEM)
    assert "s3cr3t" not in str(raised.value)


def test_an_access_key_without_its_secret_is_a_config_error(kinesis_endpoint, tmp_path, stream):
    config = job_config(kinesis_endpoint, tmp_path, stream).without(f"sensitive.systems.{SYSTEM}.aws.secretKey")
    with pytest.raises(
        ConfigError,
        match=r"'systems.kinesis.aws.accessKey' is set but 'sensitive.systems.kinesis.aws.secretKey' is not",
    ):
        KinesisClients(config, SYSTEM)


def test_the_command_exits_2_and_names_the_problem(kinesis_endpoint, tmp_path, stream):
    config = job_config(kinesis_endpoint, tmp_path, stream, task__inputs=f"{SYSTEM}.{stream},log.out")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "millstream.cli.main", "run", str(path), "--in-process"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "cannot be mixed with inputs of other systems" in result.stderr + result.stdout
    assert config[f"sensitive.systems.{SYSTEM}.aws.secretKey"] not in result.stderr + result.stdout
