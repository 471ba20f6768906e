"""A mini YARN cluster on 127.0.0.1 for the spark-submit tests: Hadoop's ``MiniYARNCluster`` (a ResourceManager
and NodeManagers in one JVM, no HDFS), started from the JARs Maven Central serves. No Hadoop installation.

    python -m tests.spark.yarn fetch     # download the JARs (make yarn-jars)
    python -m tests.spark.yarn run       # start a cluster and print its HADOOP_CONF_DIR

The JARs are the dependencies of ``tools/yarn/pom.xml`` (Hadoop of the version pyspark's Hadoop client has):
``mvn dependency:copy-dependencies`` copies them into ``$MILLSTREAM_YARN_CACHE`` (default
``~/.cache/millstream/yarn``), in a directory named after the pom's hash, made in a temporary directory and
renamed into place, as the Kafka broker's are. ``tools/yarn/MiniYarn.java`` runs with Java's single-file source
launcher (so a JDK, not only a JRE), and nothing is compiled ahead; Hadoop 3.5 needs no ``--add-opens`` on
Java 17 for what the tests do. It writes ``yarn-site.xml`` (the addresses the services bound) once every
NodeManager has registered; the cluster polls for that file, then for the NodeManagers through the
ResourceManager's REST API. ``fs.defaultFS`` is ``file:///``: the staging directory and the containers' work
directories are on this machine's disk, which every NodeManager ("host") shares.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pyspark

from tests.integration.processes import EmulatorError, cache_dir, child_setup, maven_libs

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "tools" / "yarn" / "pom.xml"
LAUNCHER = REPO / "tools" / "yarn" / "MiniYarn.java"
SPARK_HOME = Path(pyspark.__file__).parent
FINAL_STATES = frozenset({"FINISHED", "FAILED", "KILLED"})


def fetch_jars(quiet: bool = True) -> Path:
    """The cluster's JAR directory, downloaded with Maven first if it is not cached yet."""
    cache = cache_dir("MILLSTREAM_YARN_CACHE", "yarn")
    return maven_libs(POM, cache, "hadoop-yarn-server-tests-*-tests.jar", "the mini YARN cluster", quiet=quiet)


def read_hadoop_conf(path: Path) -> dict[str, str]:
    """The name → value pairs of a Hadoop configuration file."""
    root = ElementTree.parse(path).getroot()
    return {
        prop.findtext("name", ""): prop.findtext("value", "")
        for prop in root.iter("property")
    }  # fmt: skip


class YarnCluster:
    """A ResourceManager and ``node_managers`` NodeManagers of ``memory_mb`` each, with files under ``work_dir``."""

    def __init__(self, work_dir: Path, *, node_managers: int = 2, memory_mb: int = 4096, heap: str = "512m") -> None:
        self.work_dir = Path(work_dir)
        self.node_managers = node_managers
        self.memory_mb = memory_mb
        self.heap = heap
        self.conf_dir = self.work_dir / "conf"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.work_dir / "miniyarn.log"

    def env(self) -> dict[str, str]:
        """The environment ``spark-submit --master yarn`` needs to find this cluster (and pyspark's Spark)."""
        return {
            **os.environ,
            "HADOOP_CONF_DIR": str(self.conf_dir),
            "YARN_CONF_DIR": str(self.conf_dir),
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }

    def start(self, timeout: float = 120) -> YarnCluster:
        libs = fetch_jars()
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        java = str(Path(os.environ["JAVA_HOME"]) / "bin" / "java") if "JAVA_HOME" in os.environ else "java"
        command = [
            java, f"-Xmx{self.heap}", "-cp", f"{libs}/*", str(LAUNCHER),
            str(self.node_managers), str(self.memory_mb), str(self.conf_dir / "yarn-site.xml"),
        ]  # fmt: skip
        with self.log.open("wb") as log:
            # cwd: MiniYARNCluster keeps its local and log directories under ./target
            self.process = subprocess.Popen(
                command, cwd=self.work_dir, stdout=log, stderr=subprocess.STDOUT, preexec_fn=child_setup()
            )
        try:
            self._wait_until(lambda: (self.conf_dir / "yarn-site.xml").exists(), timeout, "the cluster's yarn-site.xml")
            self._wait_until(
                lambda: self.running_node_managers() == self.node_managers, timeout, "the NodeManagers to run"
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                break
            if condition():
                return
            time.sleep(0.2)
        raise EmulatorError(f"mini YARN cluster: no {what} after {timeout:.0f}s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else "(no log)"

    @property
    def conf(self) -> dict[str, str]:
        return read_hadoop_conf(self.conf_dir / "yarn-site.xml")

    def _rest_url(self, path: str) -> str:
        return f"http://{self.conf['yarn.resourcemanager.webapp.address']}/ws/v1/cluster/{path}"

    def rest(self, path: str) -> Any:
        """GET ``/ws/v1/cluster/<path>`` from the ResourceManager's REST API, parsed."""
        with urllib.request.urlopen(self._rest_url(path), timeout=10) as response:
            return json.load(response)

    def running_node_managers(self) -> int:
        nodes = (self.rest("nodes").get("nodes") or {}).get("node") or []
        return sum(1 for node in nodes if node.get("state") == "RUNNING")

    def applications(self) -> list[Mapping[str, Any]]:
        """Every application the ResourceManager knows: id, name, state, finalStatus, amContainerLogs, …"""
        return list((self.rest("apps").get("apps") or {}).get("app") or [])

    def container_output(self, application_id: str, name: str = "stdout") -> dict[str, str]:
        """Container id → the content of its ``name`` log file, from every NodeManager's log directory."""
        return {
            path.parent.name: path.read_text(errors="replace")
            for path in sorted(self.work_dir.glob(f"target/**/{application_id}/*/{name}"))
        }

    def kill_application(self, application_id: str) -> None:
        """Ask the ResourceManager to kill an application: it stops the application's containers."""
        request = urllib.request.Request(
            self._rest_url(f"apps/{application_id}/state?user.name={getpass.getuser()}"),
            data=json.dumps({"state": "KILLED"}).encode(),
            headers={"Content-Type": "application/json"},
            method="PUT",
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        """Kill the applications still running (their containers are processes of their own, which the JVM's
        death would orphan), then the JVM: a NodeManager's clean shutdown takes 15 s and more."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            if process.poll() is None and (self.conf_dir / "yarn-site.xml").exists():
                live = [app["id"] for app in self.applications() if app["state"] not in FINAL_STATES]
                for application_id in live:
                    self.kill_application(application_id)
                deadline = time.monotonic() + 30
                while live and time.monotonic() < deadline:
                    live = [app["id"] for app in self.applications() if app["state"] not in FINAL_STATES]
                    time.sleep(0.2)
        finally:
            process.kill()
            process.wait(30)

    def __enter__(self) -> YarnCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.spark.yarn")
    parser.add_argument("command", choices=["fetch", "run"])
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(fetch_jars(quiet=False))
        return 0
    with YarnCluster(Path(tempfile.mkdtemp(prefix="miniyarn-"))) as cluster:
        print(f"HADOOP_CONF_DIR={cluster.conf_dir}", flush=True)
        try:
            while cluster.process is not None and cluster.process.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
