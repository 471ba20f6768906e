"""A Spark standalone cluster on 127.0.0.1, started from the pyspark installation: a master and workers."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pyspark


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class StandaloneCluster:
    def __init__(
        self,
        work_dir: Path,
        workers: int = 2,
        cores: int = 2,
        memory: str = "1g",
        worker_env: Callable[[int], Mapping[str, str]] | None = None,
    ) -> None:
        """``worker_env(i)``: environment variables of worker ``i``, which its executors and Python workers inherit
        (a per-worker "local disk", as separate hosts would have)."""
        self.work_dir = work_dir
        self.worker_env = worker_env
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.spark_home = Path(pyspark.__file__).parent
        self.port = free_port()
        self.processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {**os.environ, **(extra or {})}
        env.update(
            SPARK_HOME=str(self.spark_home),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_MASTER_HOST="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
            SPARK_LOG_DIR=str(self.work_dir / "logs"),
        )
        return env

    def _start(self, name: str, *args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.work_dir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        process = subprocess.Popen(
            [str(self.spark_home / "bin" / "spark-class"), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(env),
        )
        self.processes.append(process)
        return process

    def start(self, timeout: float = 90) -> StandaloneCluster:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._start(
            "master", "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(free_port()),
        )  # fmt: skip
        self._wait_for("master", "I have been elected leader", timeout)
        for index in range(self.workers):
            self._start(
                f"worker-{index}", "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(free_port()), "--work-dir", str(self.work_dir / f"worker-{index}"),
                self.master_url, env=self.worker_env(index) if self.worker_env else None,
            )  # fmt: skip
        for index in range(self.workers):
            self._wait_for(f"worker-{index}", "Successfully registered with master", timeout)
        return self

    def _wait_for(self, name: str, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        path = self.work_dir / f"{name}.log"
        while time.monotonic() < deadline:
            if text in path.read_text(errors="replace"):
                return
            if any(p.poll() is not None for p in self.processes):
                break
            time.sleep(0.2)
        raise RuntimeError(f"Spark {name} did not report '{text}':\n{path.read_text(errors='replace')[-3000:]}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
