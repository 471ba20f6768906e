"""A local Spark Connect server for the tests that go through Spark Connect, as Databricks serverless and
shared clusters require: pyspark's own ``SparkConnectServer`` (its jar ships with pyspark) in a JVM of its
own, on a free port, in local mode.

Its Python workers run this interpreter, so the formats' readers and the bulk build's functions, which
execute server-side, import the millstream under test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pyspark

from tests.helpers import wait_until
from tests.integration.processes import child_setup, free_port, stop_process

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ConnectServer:
    def __init__(self, work_dir: Path, master: str = "local[2]") -> None:
        self.work_dir = work_dir
        self.master = master
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.work_dir / "connect-server.log"

    def start(self, timeout: float = 180.0) -> ConnectServer:
        spark_home = Path(pyspark.__file__).parent
        self.work_dir.mkdir(parents=True, exist_ok=True)
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.pyspark.python": sys.executable,
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "4",
            "spark.sql.warehouse.dir": str(self.work_dir / "warehouse"),
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={self.work_dir}",
        }
        command = [str(spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", self.master]
        for key, value in settings.items():
            command += ["--conf", f"{key}={value}"]
        environment = {**os.environ, "SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": sys.executable}
        for name in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET"):
            environment.pop(name, None)  # the server is a classic driver, whatever this process is
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=self.work_dir,
                preexec_fn=child_setup(),
            )  # fmt: skip
        wait_until(self._listening, timeout, f"the Spark Connect server listening on {self.url} (log: {self.log})")
        return self

    def _listening(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"the Spark Connect server exited with code {self.process.returncode}:\n{tail}")
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        stop_process(self.process, timeout=30.0)
        self.process = None
