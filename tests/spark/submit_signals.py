"""Stopping a job run by ``spark-submit`` with a signal, as systemd, ``timeout`` or a scheduler does: the signal
goes to spark-submit's JVM, to the Python driver it started, or to both (the process group). Shared by the
local, standalone and YARN tests: an unbounded job, the submitted process, and what a graceful stop leaves behind
(every container ``stopped``, each partition's checkpoint covering exactly the output it wrote)."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from millstream.config.settings import Settings
from millstream.coordinator.status import job_status
from tests.cli.test_main import by_input_partition, wait_for
from tests.helpers import create_stream, fill, job_config

PARTITIONS = 2


def expected_exit_code(target: str, signum: int) -> int:
    """What a signal to ``target`` (``jvm``, ``python``, ``group``) makes spark-submit exit with: a JVM whose
    shutdown a signal began exits 128 + the signal; a signal to the Python driver alone is the driver's graceful
    stop, exit 0, and then the JVM's."""
    return 0 if target == "python" else 128 + signum


def unbounded_job(data_dir: Path, conf_dir: Path, **extra: Any) -> tuple[Settings, Path]:
    """A pass-through job of 2 containers over 2 unsealed partitions (it runs until stopped): config and file."""
    values: dict[str, Any] = {
        "task": "tests.jobs:SlowPassThrough",
        "test__delay__seconds": 0.002,
        "job__container__count": 2,
        "job__coordinator__slots__headroom": 0,
        "job__coordinator__stop__timeout__ms": 30_000,
    }
    values.update(extra)
    config = job_config(data_dir, **values)
    create_stream(config, "in", PARTITIONS)
    create_stream(config, "out", PARTITIONS)
    fill(config, "in", PARTITIONS, 20_000)  # not sealed: the job would run for minutes
    conf_dir.mkdir(parents=True, exist_ok=True)
    path = conf_dir / "job.yaml"
    path.write_text(yaml.safe_dump(config.to_dict()), encoding="utf-8")
    return config, path


@dataclass
class SubmittedJob:
    """A ``spark-submit`` running in a session of its own: its pid is the JVM's (spark-submit execs it) and the
    process group's."""

    process: subprocess.Popen[bytes]
    output: Path

    @classmethod
    def start(cls, command: list[str], cwd: Path, env: dict[str, str], log_dir: Path) -> SubmittedJob:
        log_dir.mkdir(parents=True, exist_ok=True)
        output = log_dir / "spark-submit.log"
        with output.open("wb") as log:
            process = subprocess.Popen(
                command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return cls(process, output)

    def driver_pid(self) -> int:
        """The Python driver: the JVM's child running the entry point (``submit.py``)."""
        for child in _children(self.process.pid):
            with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                if b"submit.py" in cmdline.read():
                    return child
        raise AssertionError(
            f"spark-submit {self.process.pid} has no Python driver among {_children(self.process.pid)}"
        )

    def send(self, target: str, signum: int) -> None:
        if target == "jvm":
            os.kill(self.process.pid, signum)
        elif target == "python":
            os.kill(self.driver_pid(), signum)
        else:
            os.killpg(self.process.pid, signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def text(self) -> str:
        return self.output.read_text(errors="replace")


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as listed:
            children.extend(int(child) for child in listed.read().split())
    return children


def running_with_a_checkpoint(config: Settings) -> bool:
    """Every container running and every partition checkpointed at least once."""
    status = job_status(config)
    states = [info.get("state") for info in status.containers.values()]
    checkpointed = [row.checkpointed for row in status.lag]
    return len(states) == 2 and set(states) == {"running"} and len(checkpointed) == PARTITIONS and all(checkpointed)


def stop_with_signal(job: SubmittedJob, config: Settings, target: str, signum: int, startup_s: float) -> int:
    """Wait until the job runs and has committed, signal ``target``, and return spark-submit's exit code."""
    wait_for(lambda: running_with_a_checkpoint(config), timeout=startup_s, process=job.process, log=job.output)
    job.send(target, signum)
    # a hang guard, not a budget: the containers have the stop timeout (30 s) to commit, the driver 15 s more
    return job.process.wait(timeout=90)


def assert_stopped_after_a_final_commit(config: Settings, output: str) -> None:
    """Every container stopped (not failed, not left ``running``), and each partition's last checkpoint covers
    exactly what the job wrote: a rerun would neither repeat nor skip a message."""
    # the JVM's shutdown ran the hook to its end: no lost py4j answer, no Python traceback
    for trace in ("Py4JException", "Traceback", "ShutdownHook"):
        assert trace not in output, output[-4000:]
    status = job_status(config)
    states = {cid: info.get("state") for cid, info in status.containers.items()}
    assert set(states.values()) == {"stopped"}, f"{states}\n{output[-4000:]}"
    checkpointed = {row.ssp.partition: int(row.checkpointed or -1) for row in status.lag}
    written = by_input_partition(config)
    assert set(checkpointed) == set(range(PARTITIONS)), checkpointed
    for partition, offset in checkpointed.items():
        assert offset > 0 and max(written[partition]) == offset, (partition, offset, max(written[partition]))
        assert set(range(offset + 1)) <= set(written[partition])
