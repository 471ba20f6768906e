"""End-to-end tests of the ``millstream`` command, run as a subprocess exactly as a user runs it.

Every job config is a YAML file in ``tmp_path`` with its data (embedded log, metadata store) in
``tmp_path``; every config carries ``sensitive.password``, and every command's output is checked
never to contain it. The subprocess runs from the repository root so that ``tests.jobs`` is
importable by the driver and by Spark's Python workers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from millstream.composition.systems import system_factory
from millstream.config.settings import Settings
from millstream.coordinator.prepare import load_job_config
from millstream.coordinator.status import job_status
from millstream.coordinator.status_document import status_document
from millstream.model import OutgoingMessageEnvelope, SystemStream
from millstream.testing import read_stream, write_stream
from tests.helpers import create_stream, fill, output_origins, seal
from tests.integration.processes import free_port
from tests.metrics.scrape import fetch

REPO = Path(__file__).resolve().parents[2]
SECRET = "hunter2"
# Spark's web UI is of no use here and its port clashes with other Spark processes on the machine.
SPARK = {"spark.ui.enabled": "false"}


def write_config(tmp_path: Path, values: dict[str, Any] | None = None, name: str = "job.yaml") -> Path:
    """A pass-through job on the log system (JSON values, string keys) with its data in ``tmp_path``."""
    config = {
        "job.name": "cli-test",
        "job.data.dir": str(tmp_path / "data"),
        "task.class": "tests.jobs:PassThrough",
        "task.inputs": "log.in",
        "task.commit.ms": 200,
        "systems.log.samza.key.serde": "string",
        "systems.log.samza.msg.serde": "json",
        "systems.log.samza.offset.default": "oldest",
        "sensitive.password": SECRET,
    }
    config.update(values or {})
    path = tmp_path / name
    path.write_text(yaml.safe_dump({k: v for k, v in config.items() if v is not None}), encoding="utf-8")
    return path


def millstream(*args: Any, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the command to completion; fails the test if a ``sensitive.*`` value shows up in its output."""
    result = subprocess.run(
        [sys.executable, "-m", "millstream.cli.main", *map(str, args)],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert SECRET not in result.stdout and SECRET not in result.stderr, "a sensitive.* value was printed"
    return result


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the rich tables in ``text``, as lists of stripped cells."""
    return [[cell.strip() for cell in line.strip().strip("│").split("│")] for line in text.splitlines() if "│" in line]


def by_input_partition(config: Settings) -> dict[int, list[int]]:
    """Input offsets of the output messages of ``tests.jobs:PassThrough``, per input partition."""
    offsets: dict[int, list[int]] = defaultdict(list)
    for pairs in read_output(config).values():
        for _, value in pairs:
            offsets[value["p"]].append(int(value["o"]))
    return offsets


def read_output(config: Settings) -> dict[int, list[tuple[Any, Any]]]:
    return read_stream(config, SystemStream("log", "out"))


def bounded_input(tmp_path: Path, values: dict[str, Any] | None = None, partitions: int = 2, per_partition: int = 50):
    """A config, and its sealed input ``log.in`` filled with ``per_partition`` messages per partition."""
    path = write_config(tmp_path, values)
    config = load_job_config(path)
    create_stream(config, "in", partitions)
    create_stream(config, "out", partitions)
    written = fill(config, "in", partitions, per_partition)
    seal(config, "in")
    return path, config, written


# -- config errors: exit 2, naming the key --------------------------------------------------------------


def test_an_unknown_key_in_a_checked_namespace_exits_2_naming_the_key_and_the_accepted_ones(tmp_path):
    path = write_config(tmp_path, {"task.commit.ms": None, "task.comit.ms": 100})
    result = millstream("run", path, "--in-process")
    assert result.returncode == 2, result.stderr
    assert "unknown config key 'task.comit.ms'" in result.stderr
    assert "commit.ms" in result.stderr.split("task.comit.ms", 1)[1]  # what is accepted instead
    assert "Traceback" not in result.stderr


def test_a_value_of_the_wrong_type_exits_2_naming_the_key_and_the_value(tmp_path):
    result = millstream("run", write_config(tmp_path, {"job.container.count": "zero"}), "--in-process")
    assert result.returncode == 2, result.stderr
    assert "'job.container.count'" in result.stderr and "'zero'" in result.stderr


def test_an_unknown_system_factory_exits_2_naming_the_factory_key(tmp_path):
    path = write_config(tmp_path, {"systems.foo.samza.factory": "nosuch.module:Factory", "task.inputs": "foo.x"})
    result = millstream("run", path, "--in-process")
    assert result.returncode == 2, result.stderr
    assert "'systems.foo.samza.factory'" in result.stderr and "nosuch.module" in result.stderr


def test_an_unreadable_config_file_exits_2_printing_its_whole_path_on_one_line(tmp_path):
    missing = tmp_path / ("a-directory-with-a-long-name-" * 3) / "missing-job-config.yaml"
    assert len(str(missing)) > 100  # longer than a terminal line: the message must not be folded
    for command in (["run", missing], ["streams", "list", missing], ["job", "status", missing]):
        result = millstream(*command)
        assert result.returncode == 2, result.stderr
        assert f"cannot read config file '{missing}'" in result.stderr


def test_invalid_yaml_exits_2_naming_the_file_without_echoing_the_offending_line(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(f"job.name: t\nsensitive.password: [{SECRET}\ntask.inputs: log.in\n", encoding="utf-8")
    result = millstream("run", path, "--in-process")
    assert result.returncode == 2, result.stderr
    assert f"config file '{path}' is not valid YAML" in result.stderr
    assert "line " in result.stderr  # where, so the user can find it


def test_set_overrides_the_file_and_is_validated_like_it(tmp_path):
    path = write_config(tmp_path)  # task.commit.ms: 200
    result = millstream("run", path, "--in-process", "--set", "task.commit.ms=abc")
    assert result.returncode == 2, result.stderr
    assert "'task.commit.ms'" in result.stderr and "'abc'" in result.stderr

    broken = write_config(tmp_path, {"task.commit.ms": "abc"}, name="broken.yaml")
    assert millstream("streams", "list", broken).returncode == 2
    fixed = millstream("streams", "list", broken, "--set", "task.commit.ms=100")
    assert fixed.returncode == 0, fixed.stderr


@pytest.mark.parametrize("mode", [["--in-process"], []], ids=["in-process", "spark"])
def test_a_missing_input_stream_exits_2_naming_it_before_any_container_or_spark_starts(tmp_path, mode):
    path = write_config(tmp_path, {"task.inputs": "log.no-such-stream"})
    result = millstream("run", path, *mode)
    assert result.returncode == 2, result.stderr
    assert "stream 'log.no-such-stream' does not exist" in result.stderr
    assert "log4j" not in result.stderr and "container 0" not in result.stderr  # neither the JVM nor a container
    assert job_status(load_job_config(path)).model is None  # no generation was published


@pytest.mark.parametrize(
    ("name", "text", "args"),
    [
        ("bad.yaml", f"sensitive.password: '{SECRET}\n", []),
        ("bad.yaml", f"sensitive:\n  password: {SECRET}\n  - {SECRET}\n", []),
        ("bad.properties", f"job.name=t\nsensitive.password {SECRET}\n", []),
        ("ok.yaml", f"sensitive.password: {SECRET}\njob.container.count: zero\n", []),
        ("ok.yaml", "job.name: t\n", ["--set", f"sensitive.password{SECRET}"]),
        ("ok.yaml", "job.name: t\n", ["--set", f"sensitive.password={SECRET}", "--set", "task.window.ms=x"]),
    ],
    ids=["unterminated-quote", "bad-nesting", "properties-line", "other-key-wrong", "set-no-equals", "set-other-key"],
)
def test_sensitive_values_are_never_printed_by_a_config_error(tmp_path, name, text, args):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    result = millstream("run", path, "--in-process", *args)  # asserts the secret is not in stdout/stderr
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error:"), result.stderr


# -- streams --------------------------------------------------------------------------------------------


def test_streams_create_list_describe_seal_and_delete_a_log_stream(tmp_path):
    path = write_config(tmp_path, {"job.data.dir": "data"})  # relative: beside the config, not the cwd
    created = millstream("streams", "create", path, "log.clicks", "--partitions", "3")
    assert created.returncode == 0, created.stderr
    assert "created: log.clicks (3 partitions)" in created.stdout
    assert (tmp_path / "data").is_dir() and not (REPO / "data").exists()
    again = millstream("streams", "create", path, "clicks", "--partitions", "3")  # a bare name is the log system
    assert again.returncode == 0 and "exists: log.clicks" in again.stdout
    assert millstream("streams", "create", path, "log.views").returncode == 0
    assert millstream("streams", "list", path).stdout.split() == ["log.clicks", "log.views"]

    millstream("streams", "produce", path, "log.clicks", "--partition", "1", stdin="a\nb\nc\n")
    described = millstream("streams", "describe", path, "log.clicks")
    assert described.returncode == 0, described.stderr
    assert "log.clicks: 3 partition(s)" in described.stdout
    rows = table_rows(described.stdout)  # partition, oldest, newest, upcoming, sealed
    assert [(row[0], row[3], row[4]) for row in rows] == [("0", "0", ""), ("1", "3", ""), ("2", "0", "")]
    assert rows[1] == ["1", "0", "2", "3", ""]

    sealed = millstream("streams", "seal", path, "log.clicks")
    assert sealed.returncode == 0 and "sealed: log.clicks" in sealed.stdout
    assert [row[-1] for row in table_rows(millstream("streams", "describe", path, "log.clicks").stdout)] == ["yes"] * 3

    deleted = millstream("streams", "delete", path, "log.clicks")
    assert deleted.returncode == 0 and "deleted: log.clicks" in deleted.stdout
    assert millstream("streams", "list", path).stdout.split() == ["log.views"]
    gone = millstream("streams", "describe", path, "log.clicks")
    assert gone.returncode == 2 and "stream 'log.clicks' does not exist" in gone.stderr
    again = millstream("streams", "delete", path, "log.clicks")
    assert again.returncode == 0 and "no such stream: log.clicks" in again.stdout


def test_produce_lines_from_stdin_and_consume_prints_them_back_as_json_lines(tmp_path):
    path = write_config(tmp_path, {"systems.log.streams.lines.samza.msg.serde": "string"})
    millstream("streams", "create", path, "log.lines")
    produced = millstream("streams", "produce", path, "log.lines", stdin="first line\n\nsecond line\n{not json}\n")
    assert produced.returncode == 0, produced.stderr
    assert "produced 3 message(s) to log.lines" in produced.stderr  # blank lines are skipped

    consumed = millstream("streams", "consume", path, "log.lines")
    assert consumed.returncode == 0, consumed.stderr
    records = [orjson.loads(line) for line in consumed.stdout.splitlines()]
    assert [{k: r[k] for k in ("partition", "offset", "key", "value")} for r in records] == [
        {"partition": 0, "offset": "0", "key": None, "value": "first line"},
        {"partition": 0, "offset": "1", "key": None, "value": "second line"},
        {"partition": 0, "offset": "2", "key": None, "value": "{not json}"},
    ]
    assert all(isinstance(r["timestamp"], int) and r["timestamp"] > 0 for r in records)
    limited = millstream("streams", "consume", path, "log.lines", "--limit", "2")
    assert len(limited.stdout.splitlines()) == 2


def send_raw(config: Settings, envelope: OutgoingMessageEnvelope) -> None:
    """Write bytes as they are, past the serdes: what a dead-letter queue or another producer leaves."""
    producer = system_factory(config, "log").get_producer("log", config)
    producer.start()
    producer.send("test", envelope)
    producer.flush("test")
    producer.stop()


def test_consume_prints_an_undecodable_record_raw_naming_its_offset_and_goes_on(tmp_path):
    path = write_config(tmp_path)  # JSON values
    millstream("streams", "create", path, "log.events")
    stream = SystemStream("log", "events")
    for value in (b'{"n": 1}', b"\xff not json", b'{"n": 2}'):
        send_raw(load_job_config(path, {}), OutgoingMessageEnvelope(stream, value))
    consumed = millstream("streams", "consume", path, "log.events")
    assert consumed.returncode == 0, consumed.stderr
    records = [orjson.loads(line) for line in consumed.stdout.splitlines()]
    assert [r["value"] for r in records] == [{"n": 1}, b"\xff not json".hex(), {"n": 2}]
    assert [("error" in r) for r in records] == [False, True, False]
    assert records[1]["error"].startswith("cannot decode the value at offset 1: ")
    raw = millstream("streams", "consume", path, "log.events", "--raw")
    assert [orjson.loads(line)["value"] for line in raw.stdout.splitlines()] == [
        '{"n": 1}',
        b"\xff not json".hex(),
        '{"n": 2}',
    ]


def test_consume_with_headers_shows_each_records_headers(tmp_path):
    path = write_config(tmp_path)
    millstream("streams", "create", path, "log.events")
    stream = SystemStream("log", "events")
    envelope = OutgoingMessageEnvelope(stream, b'{"n": 1}', headers={"millstream.error.type": b"ValueError"})
    send_raw(load_job_config(path, {}), envelope)
    plain = orjson.loads(millstream("streams", "consume", path, "log.events").stdout)
    assert "headers" not in plain
    shown = orjson.loads(millstream("streams", "consume", path, "log.events", "--headers").stdout)
    assert shown["headers"] == {"millstream.error.type": "ValueError"}


def test_a_command_that_cannot_reach_kafka_prints_one_line_naming_the_brokers(tmp_path):
    path = write_config(
        tmp_path,
        {
            "systems.kafka.samza.factory": "kafka",
            "systems.kafka.bootstrap.servers": "127.0.0.1:1",
            "systems.kafka.startup.timeout.ms": "1000",
        },
    )
    for command in (["streams", "describe", path, "kafka.t"], ["streams", "consume", path, "kafka.t"]):
        result = millstream(*command)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and "no broker at 127.0.0.1:1" in lines[0], result.stderr


def test_produce_json_keyed_by_a_field_from_stdin_and_from_a_file(tmp_path):
    path = write_config(tmp_path)  # string keys, JSON values
    millstream("streams", "create", path, "log.events", "--partitions", "2")
    events = [{"user": f"u{i % 3}", "n": i} for i in range(12)]
    lines = [orjson.dumps(event).decode() for event in events]
    from_stdin = millstream(
        "streams", "produce", path, "log.events", "--format", "json", "--key-field", "user", stdin="\n".join(lines[:6])
    )
    assert from_stdin.returncode == 0, from_stdin.stderr
    (tmp_path / "events.jsonl").write_text("\n".join(lines[6:]) + "\n", encoding="utf-8")
    from_file = millstream(
        "streams", "produce", path, "log.events", "--file", tmp_path / "events.jsonl", "--format", "json",
        "--key-field", "user",
    )  # fmt: skip
    assert from_file.returncode == 0, from_file.stderr
    assert "produced 6 message(s)" in from_stdin.stderr and "produced 6 message(s)" in from_file.stderr

    consumed = [orjson.loads(line) for line in millstream("streams", "consume", path, "log.events").stdout.splitlines()]
    assert sorted((m["key"], m["value"]["n"]) for m in consumed) == sorted((e["user"], e["n"]) for e in events)
    assert all(m["value"] == events[m["value"]["n"]] for m in consumed)
    partition_of = defaultdict(set)
    for message in consumed:
        partition_of[message["key"]].add(message["partition"])
    assert all(len(partitions) == 1 for partitions in partition_of.values())  # a key stays in one partition
    for key in partition_of:  # and in order within it
        ns = [m["value"]["n"] for m in consumed if m["key"] == key]
        assert ns == sorted(ns)


def test_produce_rejects_invalid_json_with_exit_2_naming_the_line(tmp_path):
    path = write_config(tmp_path)
    millstream("streams", "create", path, "log.events")
    result = millstream("streams", "produce", path, "log.events", "--format", "json", stdin='{"n": 1}\n{oops\n')
    assert result.returncode == 2
    assert "input line 2 is not valid JSON" in result.stderr


def test_produce_and_consume_of_a_missing_stream_exit_2_naming_it(tmp_path):
    path = write_config(tmp_path)
    produced = millstream("streams", "produce", path, "log.nowhere", stdin="x\n")
    assert produced.returncode == 2 and "stream 'log.nowhere' does not exist" in produced.stderr
    consumed = millstream("streams", "consume", path, "log.nowhere")
    assert consumed.returncode == 2 and "stream 'log.nowhere' does not exist" in consumed.stderr


# -- running jobs ---------------------------------------------------------------------------------------


def test_in_process_run_of_a_bounded_job_exits_0_then_checkpoint_show_and_job_status_report_it(tmp_path):
    path, config, written = bounded_input(tmp_path, per_partition=50)
    never = millstream("job", "status", path)
    assert never.returncode == 0 and "never run" in never.stdout
    assert "no checkpoints" in millstream("checkpoint", "show", path).stdout

    result = millstream("run", path, "--in-process")
    assert result.returncode == 0, result.stderr
    assert "generation 1: finished" in result.stdout
    assert result.stderr.splitlines()[-1].startswith("job cli-test ") and "100/100 messages" in result.stderr
    assert set(output_origins(config)) == written and len(output_origins(config)) == 100

    checkpoints = millstream("checkpoint", "show", path)
    assert checkpoints.returncode == 0, checkpoints.stderr
    assert table_rows(checkpoints.stdout) == [["Partition 0", "log.in.0", "49"], ["Partition 1", "log.in.1", "49"]]

    status = millstream("job", "status", path)
    assert status.returncode == 0, status.stderr
    assert "generation 1: 1 container(s), 2 task(s)" in status.stdout
    containers, lag = status.stdout.split("lag", 1)
    # container, state, attempt, restarts, backoff (the restart strategy's last delay)
    assert [row[:5] for row in table_rows(containers)] == [["0", "finished", "1", "0", "0.0s"]]
    # task, partition, checkpointed, upcoming, lag
    assert table_rows(lag) == [
        ["Partition 0", "log.in.0", "49", "50", "0"],
        ["Partition 1", "log.in.1", "49", "50", "0"],
    ]


def test_run_quiet_prints_no_progress_line_only_the_container_table(tmp_path):
    path, _, _ = bounded_input(tmp_path, per_partition=10)
    result = millstream("run", path, "--in-process", "--quiet")
    assert result.returncode == 0, result.stderr
    assert "generation 1: finished" in result.stdout
    assert result.stderr == ""


@pytest.mark.spark
def test_spark_run_of_a_bounded_two_partition_job_exits_0_and_prints_the_container_table(tmp_path):
    path, config, written = bounded_input(tmp_path, {"job.container.count": 2, **SPARK}, per_partition=200)
    result = millstream("run", path)  # default master: local[containers + headroom]
    assert result.returncode == 0, result.stderr
    assert "job cli-test generation 1: finished" in result.stdout
    progress = [line for line in result.stderr.splitlines() if line.startswith("job cli-test ")]
    assert len(progress) == 1 and "400/400 messages" in progress[0] and "finished" in progress[0], result.stderr
    assert " INFO [" not in result.stderr  # without -v the containers' INFO lines stay out of the progress line
    rows = table_rows(result.stdout)  # container, tasks, messages, commits, seconds, pid
    assert [row[:3] for row in rows] == [["0", "1", "200"], ["1", "1", "200"]]
    assert all(int(row[5]) != 0 for row in rows)
    origins = output_origins(config)
    assert len(origins) == 400 and set(origins) == written


# every kind of secret a job config carries, each with a value no output may show
SECRETS = {
    "sensitive.password": SECRET,
    "sensitive.blob.store.s3.access.key.id": "AKIAMILLSTREAMTESTID",
    "sensitive.blob.store.s3.secret.access.key": "s3-secret-never-shown",
    "sensitive.blob.store.azure.account.key": "azure-key-never-shown",
    "systems.kafka.consumer.sasl.password": "sasl-plain-never-shown",  # passed through to librdkafka as is
    "sensitive.systems.kafka.producer.sasl.password": "sasl-sensitive-never-shown",
}
WITH_SECRETS = {
    **SECRETS,
    "systems.kafka.samza.factory": "kafka",  # configured, never reached: the job reads and writes the log
    "systems.kafka.bootstrap.servers": "127.0.0.1:9",
    "systems.kafka.consumer.security.protocol": "SASL_PLAINTEXT",
    "systems.kafka.consumer.sasl.mechanism": "PLAIN",
    "systems.kafka.consumer.sasl.username": "millstream",
}


def _leaked(text: str) -> list[str]:
    return [key for key, value in SECRETS.items() if value in text]


@pytest.mark.spark
def test_no_secret_reaches_logs_cli_output_job_status_status_json_or_spark_event_logs(tmp_path):
    """A running job, then its failure with an error that quotes every secret, all in one Spark run."""
    events = tmp_path / "spark-events"
    events.mkdir()
    port = free_port()
    values = {
        **SPARK,
        **WITH_SECRETS,
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",  # Spark 4 compresses by default: a grep would find nothing
        "task.class": "tests.jobs:FailsQuotingSecrets",
        "test.delay.seconds": 0.001,
        "test.quoted.keys": ",".join(SECRETS),
        "job.container.retry.count": 0,
        "metrics.prometheus.port": port,
        "metrics.snapshot.interval.ms": 200,
    }
    path = write_config(tmp_path, values)
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    fill(config, "in", 2, 200)  # never sealed: the job runs until the message that fails it
    job, stdout, stderr = start_job(path, tmp_path / "run", "--verbose")
    try:
        wait_for(lambda: _running_with_a_checkpoint(config), timeout=120, process=job, log=stderr)
        served = {route: fetch(port, route)[2].decode() for route in ("/status.json", "/metrics", "/")}
        commands = [
            millstream("job", "status", path),
            millstream("checkpoint", "show", path),
            millstream("streams", "list", path),
            millstream("run", path, "--set", "job.container.count=zero"),  # a config error quotes values
        ]
        write_stream(config, SystemStream("log", "in"), [("k0", "quote-secrets")], partition=0)
        assert job.wait(timeout=120) == 1, stderr.read_text()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert "running" in served["/status.json"] and "millstream_" in served["/metrics"]
    for route, body in served.items():
        assert not _leaked(body), f"{route} shows {_leaked(body)}"
    commands.append(millstream("job", "status", path))
    assert [c.returncode for c in commands] == [0, 0, 0, 2, 0]
    for command in commands:
        assert not _leaked(command.stdout + command.stderr), f"{command.args[3:]} printed {_leaked(command.stdout)}"
    run_output = stdout.read_text() + stderr.read_text()
    # --verbose, in the documented format: a container's lines name the job, the container and the task
    assert "INFO [cli-test 0 Partition 1] tests.jobs: first message of partition 1" in run_output
    assert "INFO [cli-test 0 -] millstream.spark.container_task: container 0 runs as Spark task" in run_output
    assert "login refused with ********" in run_output  # the cause is shown, the secrets masked
    assert not _leaked(run_output), f"the run's logs show {_leaked(run_output)}"
    document = orjson.dumps(status_document(config)).decode()  # what /status.json serves
    assert "login refused" in document and not _leaked(document), _leaked(document)
    logs = [f for f in events.rglob("*") if f.is_file()]
    assert logs and "login refused" in "".join(f.read_text(errors="replace") for f in logs)
    for log in logs:
        assert not _leaked(log.read_text(errors="replace")), f"{log.name} holds {_leaked(log.read_text())}"


@pytest.mark.spark
def test_too_few_spark_task_slots_exits_2_quickly_with_a_message_about_task_slots(tmp_path):
    path, _, _ = bounded_input(tmp_path, {"job.container.count": 2, **SPARK}, per_partition=1)
    result = millstream("run", path, "--master", "local[1]", timeout=60)  # raises if it hangs
    assert result.returncode == 2, result.stderr
    assert "offers 1 task slot(s), but the job needs 3 (2 container(s) + 1 headroom)" in result.stderr
    assert "container 0" not in result.stderr


@pytest.mark.spark
def test_sigterm_stops_a_spark_job_with_exit_0_after_flushing_and_committing_and_a_rerun_has_no_duplicates(tmp_path):
    path = write_config(tmp_path, {"task.class": "tests.jobs:SlowPassThrough", "test.delay.seconds": 0.001, **SPARK})
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 2)
    first_batch = fill(config, "in", 2, 3000)  # unbounded: not sealed, the job would run forever
    job, stdout, stderr = start_job(path, tmp_path)
    try:
        wait_for(lambda: _running_with_a_checkpoint(config), timeout=120, process=job, log=stderr)
        running = millstream("job", "status", path)
        assert "running" in [row[1] for row in table_rows(running.stdout.split("lag")[0])]
        job.send_signal(signal.SIGTERM)
        code = job.wait(timeout=30)  # raises if the graceful stop hangs
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert code == 0, stderr.read_text()
    assert "SIGTERM: stopping containers gracefully" in stderr.read_text()
    assert "generation 1: stopped" in stdout.read_text()
    assert SECRET not in stdout.read_text() + stderr.read_text()

    checkpointed = {row[1]: int(row[2]) for row in table_rows(millstream("checkpoint", "show", path).stdout)}
    assert set(checkpointed) == {"log.in.0", "log.in.1"}
    output = by_input_partition(config)
    for partition in (0, 1):
        # everything up to the checkpoint reached the output before the checkpoint was written
        assert len(output[partition]) >= checkpointed[f"log.in.{partition}"] + 1
        assert set(range(checkpointed[f"log.in.{partition}"] + 1)) <= set(output[partition])

    second_batch = fill(config, "in", 2, 100, start=3000)
    seal(config, "in")
    rerun = millstream("run", path, "--in-process")
    assert rerun.returncode == 0, rerun.stderr
    assert "generation 2: finished" in rerun.stdout
    origins = output_origins(config)
    assert len(origins) == 6200, "a graceful stop must commit: nothing processed twice"
    assert set(origins) == first_batch | second_batch


@pytest.mark.parametrize(
    "mode", [pytest.param([], marks=pytest.mark.spark, id="spark"), pytest.param(["--in-process"], id="in-process")]
)
def test_a_task_that_raises_fails_the_job_with_exit_1_and_stderr_names_the_cause(tmp_path, mode):
    path = write_config(
        tmp_path,
        {
            "task.class": "tests.jobs:FailsOnPoison",
            "systems.log.streams.in.samza.msg.serde": "string",
            "job.container.retry.count": 0,
            **SPARK,
        },
    )
    assert millstream("streams", "create", path, "log.in").returncode == 0
    assert millstream("streams", "create", path, "log.out").returncode == 0
    assert millstream("streams", "produce", path, "log.in", stdin="fine\npoison\nnever\n").returncode == 0
    assert millstream("streams", "seal", path, "log.in").returncode == 0

    result = millstream("run", path, *mode)
    assert result.returncode == 1, result.stderr
    assert "job failed:" in result.stderr
    assert "ValueError: poison message at offset 1" in result.stderr
    assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr  # the user's, once
    assert "generation" not in result.stdout  # no result table for a failed job


@pytest.mark.spark
def test_a_spark_job_whose_task_raises_prints_task_stream_partition_offset_and_the_traceback_once(tmp_path):
    """Spark retries the container (job.container.retry.count defaults to 3) and logs every failed attempt with
    the worker's traceback and a Java stack; millstream run prints the failure once, without Spark's lines."""
    path, config, _ = bounded_input(
        tmp_path, {"task.class": "tests.jobs:FailingOnSome", "test.fail.values": "3", **SPARK}, 1, 6
    )
    result = millstream("run", path)
    assert result.returncode == 1, result.stderr
    header = (
        "job failed: millstream.runtime.process_errors.TaskProcessError: task 'Partition 0' failed processing "
        "offset 3 of stream 'log.in' partition 0: ValueError: cannot handle 3"
    )
    assert result.stderr.count(header) == 1, result.stderr
    assert result.stderr.count("Traceback (most recent call last)") == 1, result.stderr
    restarts = [line for line in result.stderr.splitlines() if " restarted (attempt " in line]
    assert restarts and all("ValueError: cannot handle 3" in line for line in restarts), result.stderr
    # the header and the traceback's last line, besides one line per restart naming its cause
    assert result.stderr.count("ValueError: cannot handle 3") == 2 + len(restarts)
    assert 'tests/jobs.py", line' in result.stderr
    for spark_line in ("TaskSetManager", "Executor:", "PythonException", "\tat org.apache", "SQLSTATE"):
        assert spark_line not in result.stderr, result.stderr
    # everything before the failing offset, nothing from it on (a retry may repeat what was not committed)
    assert {value for _, value in output_origins(config)} == {0, 1, 2}


def _running_with_a_checkpoint(config: Settings) -> bool:
    status = job_status(config)
    running = any(info.get("state") == "running" for info in status.containers.values())
    return running and any(row.checkpointed is not None for row in status.lag)


def start_job(path: Path, tmp_path: Path, *options: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """``millstream run [options] path`` in the background, in its own process group (so a failed test can
    kill the JVM too); returns the process and the files its stdout and stderr go to."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    with stdout.open("w") as out, stderr.open("w") as err:
        job = subprocess.Popen(
            [sys.executable, "-m", "millstream.cli.main", "run", *options, str(path)],
            cwd=REPO,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    return job, stdout, stderr


def wait_for(probe: Callable[[], bool], timeout: float, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the job exited with {process.returncode} early:\n{log.read_text()}")
        if probe():
            return
        time.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout}s:\n{log.read_text()}")


def test_job_status_shows_how_much_of_a_waiting_containers_restart_delay_is_left() -> None:
    from millstream.cli.main import _backoff

    until = int(time.time() * 1000) + 4_000
    assert _backoff({"state": "backoff", "backoff-ms": 8000, "backoff-until": until}).endswith("s left of 8.0s")
    assert _backoff({"state": "running", "backoff-ms": 8000, "backoff-until": until}) == "8.0s"
    assert _backoff({"state": "running"}) == "-"
