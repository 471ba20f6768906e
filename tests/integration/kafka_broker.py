"""A real Apache Kafka broker for tests and benchmarks: KRaft mode, one combined broker+controller
node on 127.0.0.1, started from the JARs Maven Central serves. No Docker, no ZooKeeper.

    python -m tests.integration.kafka_broker fetch     # download the JARs (make kafka-jars)
    python -m tests.integration.kafka_broker run       # start a broker and print its address

The JARs are the dependencies of ``tools/kafka/pom.xml``: ``mvn dependency:copy-dependencies`` copies
them (through the user's ~/.m2) into ``$MILLSTREAM_KAFKA_CACHE`` (default ``~/.cache/millstream/kafka``),
in a directory named after the pom's hash, so changing the Kafka version fetches again and several
checkouts share one copy. The copy is made in a temporary directory and renamed into place, so
concurrent test sessions never see a half-filled directory.

A broker keeps its ports and log directory for its lifetime: :meth:`KafkaBroker.restart` stops it
cleanly and starts it again on the same ports with the same data, which is what the broker-restart
tests need. On Linux the JVM is told to die with the process that started it, so a killed test run
leaves no broker behind.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from tests.integration.processes import cache_dir, child_setup, free_port, maven_libs

REPO = Path(__file__).resolve().parents[2]
POM = REPO / "tools" / "kafka" / "pom.xml"
READY_LINE = "Kafka Server started"


class KafkaBrokerError(RuntimeError):
    """The broker could not be fetched, formatted or started; the message says which step and why."""


def cache_root() -> Path:
    return cache_dir("MILLSTREAM_KAFKA_CACHE", "kafka")


def fetch_jars(quiet: bool = True) -> Path:
    """The broker's JAR directory, downloaded with Maven first if it is not cached yet."""
    return maven_libs(POM, cache_root(), "kafka_2.13-*.jar", "the Kafka broker", quiet=quiet)


def cluster_id() -> str:
    """A random cluster id in Kafka's format: 16 bytes, URL-safe base64 without padding. Like Kafka's own
    ``Uuid.randomUuid``, never one starting with ``-``: ``kafka-storage format -t`` would take it for an
    option (about 1 id in 64)."""
    while True:
        candidate = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not candidate.startswith("-"):
            return candidate


BROKER_SETTINGS: Mapping[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    # A crashed transactional writer blocks read_committed readers until its transaction is aborted:
    # look for timed-out transactions every second instead of every 10 s.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "log.cleaner.backoff.ms": "500",
    "log.segment.delete.delay.ms": "1000",
    "controlled.shutdown.enable": "true",
}

LOG4J2 = """\
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.file.ref = FILE
logger.ready.name = kafka.server.KafkaRaftServer
logger.ready.level = info
"""


class KafkaBroker:
    """One KRaft broker+controller on 127.0.0.1 with a private log directory under ``work_dir``."""

    def __init__(
        self,
        work_dir: Path,
        *,
        settings: Mapping[str, str] | None = None,
        heap: str = "768m",
        log_level: str = "INFO",
    ) -> None:
        self.work_dir = Path(work_dir)
        self.port = free_port()
        self.controller_port = free_port()
        self.settings = dict(settings or {})
        self.heap = heap
        self.log_level = log_level
        self.cluster_id = cluster_id()
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stopped_at: float | None = None
        """When the broker's process last ended (``time.monotonic()``): no client reads from it after that until
        it starts again, unlike the moment :meth:`start` returns, which comes after clients may already use it."""

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def server_log(self) -> Path:
        return self.work_dir / "server.log"

    def _write_config(self) -> Path:
        settings = dict(BROKER_SETTINGS)
        settings.update(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
                "log.dirs": str(self.log_dir),
            }
        )
        settings.update(self.settings)
        path = self.work_dir / "server.properties"
        path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        (self.work_dir / "log4j2.properties").write_text(LOG4J2.format(log=self.server_log, level=self.log_level))
        return path

    def _java(self, libs: Path, main: str, *args: str, heap: str, short_lived: bool = False) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise KafkaBrokerError("'java' is not on PATH: the Kafka broker needs Java 17 or newer")
        return [
            java,
            f"-Xmx{heap}",
            "-Xms128m",
            *(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"] if short_lived else ["-XX:+UseG1GC"]),
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            "-cp",
            f"{libs}/*",
            main,
            *args,
        ]

    def _format(self, libs: Path, config: Path) -> None:
        if (self.log_dir / "meta.properties").exists():
            return
        arguments = ("format", "-t", self.cluster_id, "-c", str(config))
        command = self._java(libs, "kafka.tools.StorageTool", *arguments, heap="256m", short_lived=True)
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise KafkaBrokerError(
                f"formatting the broker's storage failed (exit {completed.returncode}):\n"
                f"{completed.stdout[-2000:]}{completed.stderr[-2000:]}"
            )

    def start(self, timeout: float = 120.0) -> KafkaBroker:
        """Start the broker (formatting its storage on first start) and wait until it serves requests."""
        if self.process is not None and self.process.poll() is None:
            return self
        libs = fetch_jars()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        self._format(libs, config)
        log_offset = self.server_log.stat().st_size if self.server_log.exists() else 0
        stdout = open(self.work_dir / "stdout.log", "ab")  # noqa: SIM115 - owned by the process
        self.process = subprocess.Popen(
            self._java(libs, "kafka.Kafka", str(config), heap=self.heap),
            stdout=stdout,
            stderr=subprocess.STDOUT,
            preexec_fn=child_setup(),
        )
        stdout.close()
        self._wait_ready(log_offset, timeout)
        self.starts += 1
        return self

    def _wait_ready(self, log_offset: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise KafkaBrokerError(
                    f"the broker exited with code {self.process.returncode} while starting:\n{self._log_tail()}"
                )
            if self.server_log.exists():
                with open(self.server_log, "rb") as log:
                    log.seek(log_offset)
                    ready = READY_LINE.encode() in log.read()
                if ready and self._serves_metadata(deadline):
                    return
            time.sleep(0.1)
        self.stop()
        raise KafkaBrokerError(f"the broker did not start within {timeout:.0f}s:\n{self._log_tail()}")

    def _serves_metadata(self, deadline: float) -> bool:
        try:
            from confluent_kafka.admin import AdminClient
        except ImportError:  # the tools work without the client library; the log line is enough then
            return True
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 3})
        while time.monotonic() < deadline:
            try:
                if admin.list_topics(timeout=5).brokers:
                    return True
            except Exception:
                time.sleep(0.2)
        return False

    def _log_tail(self) -> str:
        parts = []
        for name in ("stdout.log", "server.log"):
            path = self.work_dir / name
            if path.exists():
                parts.append(f"--- {name}\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)

    def stop(self, timeout: float = 60.0) -> None:
        """Shut down cleanly (SIGTERM: a controlled shutdown flushes and closes the logs); SIGKILL
        only if that takes longer than ``timeout``."""
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.process = None
        self.stopped_at = time.monotonic()

    def restart(self, down_seconds: float = 0.0, timeout: float = 120.0) -> None:
        """Stop the broker, stay down ``down_seconds``, start it again on the same ports and data."""
        self.stop()
        if down_seconds:
            time.sleep(down_seconds)
        self.start(timeout)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="The Kafka broker of millstream's tests and benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="download the broker JARs into the cache (needs mvn) and print their directory")
    run = sub.add_parser("run", help="start a broker in a temporary directory until interrupted")
    run.add_argument("--dir", type=Path, help="work directory (default: a new temporary one)")
    args = parser.parse_args()
    if args.command == "fetch":
        print(fetch_jars(quiet=False))
        return
    work = args.dir or Path(tempfile.mkdtemp(prefix="millstream-kafka-"))
    with KafkaBroker(work) as broker:
        print(f"Kafka broker at {broker.bootstrap_servers} (data and logs in {work}); Ctrl-C stops it", flush=True)
        try:
            while broker.running:
                time.sleep(1)
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
