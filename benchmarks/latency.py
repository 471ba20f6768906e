"""End-to-end latency: a fixed-rate producer, each contender consume → produce, a ``read_committed`` reader.

    python -m benchmarks.latency [--rate 1000] [--seconds 20] [--warmup 5] [--partitions 4] [--keys 1000]
                                 [--state-keys 1000000]
                                 [--workload w1 --workload w2] [--contender raw --contender bytewax ...]
                                 [--set key=value ...] [--no-spark] [--bootstrap host:port]
                                 [--out benchmarks/results/latency.json]

Without ``--bootstrap`` a KRaft broker is started from the test harness's JARs (make kafka-jars).
Workloads: ``w1`` pass-through (input topic → output topic, same key), ``w2`` count per key (millstream:
a RocksDB store with a Kafka changelog; raw: a dict), ``w2-blob`` the same count with the store backed up to a blob
store (the S3 API of a moto server the run starts; raw: a dict). Contenders, each alone, in turn, on fresh topics:
  raw                 confluent-kafka consume → produce loop in a subprocess (read_committed, idempotent producer)
  millstream          ``millstream run --in-process``, the job's DEFAULT config (at-least-once, commit
                      every 60 s)
  millstream-tuned    the same with the ``--set`` overrides (default: ``TUNED`` below)
  millstream-eos      the same with ``task.processing.guarantee=exactly-once`` (a transaction per commit, 100 ms)
  millstream-spark    ``millstream run`` through the Spark runner, local mode, 1 container, default config
With ``--state-keys N``, one record for each of ``key-0`` … ``key-<N-1>`` is written to the input before the
contender starts and its output read back before the warm-up begins (not measured): W2 then holds N keys of state
(RocksDB and its changelog; the raw loop's dict), and ``--keys N`` makes every measured record update one of them.
Each value is ``b"<seq>,<send time ns>,<padding>"``. The producer first sends probes at 10/s until the
contender's output topic has a record (read uncommitted: its high watermark moves, whether or not the
transaction is committed), then ``--warmup`` seconds at ``--rate`` (excluded), then ``--seconds`` at
``--rate`` (measured). The reader (``isolation.level=read_committed``) takes every record of the output
topic; latency = the time the reader got it - its send time. A contender that has not delivered every
record sent (probes and warm-up too) within ``--deadline`` seconds of the last send fails the run, naming
how many are missing (``--keep-going``: that contender's row says so, the others are still measured, and
the run exits non-zero). millstream's commits are the write times of its checkpoint topic's records.
Results go to ``--out`` (JSON, rewritten after each contender: figures, ratios to the raw loop, latency per
100 ms of send time, commit times) and, when matplotlib is installed (the bench extra), a PNG beside it.
Contenders' logs stay in a temporary directory (printed first); ``--job-verbose`` adds millstream's INFO lines.

The peers run the throughput benchmark's scripts (``benchmarks/peers/scripts``) with ``--follow``: unbounded
consume → produce jobs, stopped with SIGTERM like the others, W2 sending ``b"<count>," + value``, each in its own
venv (``benchmarks/peers/contenders.py``: created on first use from the pinned requirements, then reused), with
that peer's default settings but for reading the input from its start (each script's docstring says which):
  bytewax             Bytewax, its Kafka source tailing the topic, recovery on, 10 s epochs
  quix                Quix Streams, ``Application.run()``: at-least-once, its 5 s commit interval
  faust               Faust (faust-streaming), one worker, a Table (memory + changelog) for W2
  spark-ss            Spark Structured Streaming on ``local[2]`` with its default trigger (a micro-batch as soon as
                      the previous one ends), the Kafka connector's JARs (``benchmarks/peers/spark_connector.py``)
  spark-ss-min        the same with Spark's lowest-latency trigger: real-time mode (``trigger(realTime=...)``)
A peer that cannot be installed, started or deliver every record fails its own row (with the reason); the others
are still measured, and the run exits non-zero only when one of ours (raw, millstream*) failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from benchmarks.peers.contenders import CONTENDERS as PEER_CONTENDERS
from benchmarks.peers.contenders import Contender, NotRunnableError, interpreter
from tests.integration.kafka.helpers import create_topic

REPO = Path(__file__).resolve().parents[1]
RUN_ID = uuid.uuid4().hex[:6]
PEERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "bytewax": ("Bytewax", ()),
    "quix": ("Quix Streams", ()),
    "faust": ("Faust", ()),
    "spark-ss": ("Spark Structured Streaming", ()),
    "spark-ss-min": ("Spark Structured Streaming", ("--trigger", "realtime")),
}
"""Each peer contender: the throughput benchmark's contender (its script, venv and preparation) and extra arguments."""
OURS = ("raw", "millstream", "millstream-tuned", "millstream-eos", "millstream-spark")
CONTENDERS = (*OURS, *PEERS)
PEER_GRACE_S = 20.0
"""Seconds a peer has to stop on SIGTERM before it is killed (its figures are taken by then)."""
TUNED = (
    "systems.kafka.transactional.writes=false",
    "systems.kafka.producer.linger.ms=0",
    "task.commit.ms=10000",
    "task.commit.snapshot.beside.processing.enabled=true",
)
"""``millstream-tuned``'s overrides unless ``--set`` is given: changelog writes outside transactions, the
producer sending at once, a commit every 10 s."""
EOS = ("task.processing.guarantee=exactly-once",)
"""``millstream-eos``: output, changelog and checkpoints in one transaction per commit (every 100 ms unless set)."""
BLOB_ENDPOINT: dict[str, str] = {}
"""The moto S3 server's URL (``url``) while ``w2-blob`` runs."""
DEFAULT_COMMIT_MS = 60_000
EOS_COMMIT_MS = 100
PROBE_RATE = 10.0
MAX_COMMIT_LINES = 60
WARMUP_RECORDS = 200_000
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("p99.9", 99.9), ("max", 100.0))
TASKS = {"w1": "PassThrough", "w2": "CountPerKey", "w2-blob": "CountPerKey"}
WORKLOAD_NAMES = {
    "w1": "W1 pass-through",
    "w2": "W2 count per key (RocksDB + changelog)",
    "w2-blob": "W2 count per key (RocksDB + blob store: S3 API of moto)",
}
WORKLOADS = tuple(TASKS)


class MissingRecordsError(RuntimeError):
    """A contender did not deliver every record sent within the deadline: its figures would be partial."""


@dataclass
class Received:
    """What the reader took off a contender's output topic."""

    seqs: bytearray
    """1 per seq received (the first time)."""
    latency_ns: list[int] = field(default_factory=list)
    send_ns: list[int] = field(default_factory=list)
    seq_of: list[int] = field(default_factory=list)
    duplicates: int = 0
    wrong_counts: int = 0
    received: int = 0
    preloaded: int = 0
    """Outputs of the ``--state-keys`` records (seq -1), not measured."""


class Reader(threading.Thread):
    """Reads the output topic from offset 0, ``read_committed``, recording each record's latency."""

    def __init__(
        self, bootstrap: str, topic: str, partitions: int, workload: str, capacity: int, keys: int, state_keys: int = 0
    ) -> None:
        super().__init__(daemon=True, name=f"reader-{topic}")
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"latency-reader-{topic}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
                "fetch.queue.backoff.ms": 1,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.workload = workload
        self.keys = keys
        self.state_keys = state_keys
        self.data = Received(bytearray(capacity))
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                batch = self.consumer.consume(1000, 0) or self.consumer.consume(1, 0.05)
                now = time.time_ns()
                if batch:
                    with self.lock:
                        for message in batch:
                            self._record(message, now)
        except BaseException as error:  # reported by the main thread
            self.error = error
        finally:
            self.consumer.close()

    def _record(self, message: Any, now: int) -> None:
        error = message.error()
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise RuntimeError(f"reading the output: {error}")
            return
        data = self.data
        data.received += 1
        fields = message.value().split(b",", 3)
        if self.workload != "w1":
            count, seq, sent = int(fields[0]), int(fields[1]), int(fields[2])
            if seq < 0:
                data.preloaded += 1
                return
            # the seq-th record is the (seq // keys + 1)-th of its key, after the key's --state-keys record if any
            if count != seq // self.keys + 1 + (seq % self.keys < self.state_keys):
                data.wrong_counts += 1
        else:
            seq, sent = int(fields[0]), int(fields[1])
            if seq < 0:
                data.preloaded += 1
                return
        if seq >= len(data.seqs) or data.seqs[seq]:
            data.duplicates += 1
            return
        data.seqs[seq] = 1
        data.seq_of.append(seq)
        data.send_ns.append(sent)
        data.latency_ns.append(now - sent)

    def preloaded(self) -> int:
        with self.lock:
            return self.data.preloaded

    def missing(self, sent: int) -> int:
        with self.lock:
            return sent - self.data.seqs.count(1, 0, sent)


class FixedRateProducer(threading.Thread):
    """Probes at ``PROBE_RATE`` until ``ready`` is set, then ``rate`` msg/s for warm-up + measured seconds."""

    def __init__(self, bootstrap: str, topic: str, args: argparse.Namespace, ready: threading.Event) -> None:
        super().__init__(daemon=True, name=f"producer-{topic}")
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all", "partitioner": "murmur2_random"}
        )
        self.topic = topic
        self.rate = float(args.rate)
        self.warmup = float(args.warmup)
        self.seconds = float(args.seconds)
        self.keys = args.keys
        self.size = args.size
        self.ready = ready
        self.abort = threading.Event()
        self.sent = 0
        self.first_measured = -1
        self.measured_start_ns = 0
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.behind_max_ms = 0.0
        self.probe_seconds = 0.0

    def _send(self, seq: int) -> None:
        now = time.time_ns()
        head = b"%d,%d," % (seq, now)
        value = head + b"x" * max(0, self.size - len(head))
        while True:
            try:
                self.producer.produce(self.topic, value, b"key-%d" % (seq % self.keys))
                break
            except BufferError:
                self.producer.poll(0.001)
        self.producer.poll(0)

    def run(self) -> None:
        try:
            started = time.monotonic()
            while not self.ready.is_set() and not self.abort.is_set():
                self._send(self.sent)
                self.sent += 1
                self.producer.flush(1)
                self.ready.wait(1 / PROBE_RATE)
            self.probe_seconds = time.monotonic() - started
            warmup = int(self.rate * self.warmup)
            total = warmup + int(self.rate * self.seconds)
            base = self.sent
            start = time.monotonic()
            index = 0
            while index < total and not self.abort.is_set():
                due = min(total, int((time.monotonic() - start) * self.rate) + 1)
                if due - index > 1:
                    self.behind_max_ms = max(self.behind_max_ms, (due - index - 1) / self.rate * 1000)
                while index < due:
                    if index == warmup:
                        self.first_measured = base + index
                        self.measured_start_ns = time.time_ns()
                    self._send(base + index)
                    index += 1
                    self.sent = base + index
                next_at = start + index / self.rate
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if self.producer.flush(60) != 0:
                raise RuntimeError(f"{self.topic}: input records still unsent after 60 s")
        except BaseException as error:
            self.error = error
        finally:
            self.done.set()


def output_has_records(
    bootstrap: str,
    topic: str,
    partitions: int,
    ready: threading.Event,
    stop: threading.Event,
    preloaded: Callable[[], bool] = lambda: True,
):
    """Sets ``ready`` when the output topic's high watermark moves (records written, committed or not) and
    ``preloaded()`` says the ``--state-keys`` records were all read back."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"latency-probe-{topic}"})
    try:
        while not stop.is_set() and not ready.is_set():
            if not preloaded():
                stop.wait(0.2)
                continue
            for partition in range(partitions):
                try:
                    _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5, cached=False)
                except KafkaException:  # a leader moving, a broker busy: asked again
                    continue
                if high > 0:
                    ready.set()
                    break
            stop.wait(0.05)
    finally:
        consumer.close()


def preload(bootstrap: str, topic: str, keys: int) -> None:
    """One record for each of ``key-0`` … ``key-<keys - 1>`` (value ``-1,0,``: not measured) into the input topic
    before the contender starts, so a W2 contender holds ``keys`` keys of state while it is measured (the measured
    records' keys are among them when ``--keys`` is at most ``--state-keys``)."""
    if keys <= 0:
        return
    producer = Producer(  # the fixed-rate producer's partitioner: a key's records meet in one task's store
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000, "partitioner": "murmur2_random"}
    )
    for index in range(keys):
        while True:
            try:
                producer.produce(topic, b"-1,0,", b"key-%d" % index)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{topic}: the --state-keys records were not all written within 120 s")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def properties(values: dict[str, Any]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def job_properties(
    name: str, workdir: Path, bootstrap: str, workload: str, source: str, sink: str, sets: list[str]
) -> Path:
    config: dict[str, Any] = {
        "job.name": name,
        "job.data.dir": str(workdir / "data"),
        "job.container.count": 1,
        "metadata.store.factory": "kafka",
        "task.checkpoint.factory": "kafka",
        "systems.kafka.samza.factory": "kafka",
        "systems.kafka.bootstrap.servers": bootstrap,
        "systems.kafka.samza.offset.default": "oldest",
        "task.class": f"benchmarks.latency_tasks:{TASKS[workload]}",
        "task.inputs": f"kafka.{source}",
        "bench.output": sink,
    }
    if workload == "w2":
        config["stores.counts.factory"] = "rocksdb"
        config["stores.counts.changelog"] = f"kafka.{name}-counts-changelog"
    if workload == "w2-blob":
        config["stores.counts.factory"] = "rocksdb"
        config["stores.counts.backup.factories"] = "blobstore"
        config["task.checkpoint.read.versions"] = "2,1"
        config["blob.store.manager.factory"] = "s3"
        config["blob.store.s3.bucket"] = "latency"
        config["blob.store.s3.endpoint.url"] = BLOB_ENDPOINT.get("url", "")
        config["sensitive.blob.store.s3.access.key.id"] = "bench"
        config["sensitive.blob.store.s3.secret.access.key"] = "bench"
    for setting in sets:
        key, _, value = setting.partition("=")
        config[key.strip()] = value.strip()
    path = workdir / "job.properties"
    path.write_text(properties(config))
    return path


def peer(contender: str) -> Contender:
    """The throughput benchmark's contender that ``contender`` (a key of ``PEERS``) runs."""
    return next(c for c in PEER_CONTENDERS if c.name == PEERS[contender][0])


def peer_command(
    contender: str, args: argparse.Namespace, name: str, workdir: Path, workload: str, source: str, sink: str
) -> tuple[list[str], dict[str, str]]:
    """A peer's ``--follow`` command line in its own venv (created or updated first) and its environment;
    :class:`NotRunnableError` when it cannot be installed or prepared."""
    spec = peer(contender)
    python = interpreter(spec)
    env = spec.prepare() if spec.prepare else {}
    command = [str(python), *spec.command, *PEERS[contender][1], "--bootstrap", args.bootstrap, "--input", source]
    command += ["--output", sink, "--workload", workload, "--partitions", str(args.partitions)]
    return [*command, "--workdir", str(workdir / "peer"), "--name", name, "--follow"], env


def contender_command(
    contender: str, args: argparse.Namespace, name: str, workdir: Path, workload: str, source: str, sink: str
) -> tuple[list[str], list[str]]:
    """The command line, and the config overrides it runs with (millstream's); not for peers (``peer_command``)."""
    if contender == "raw":
        command = [sys.executable, "-m", "benchmarks.latency_tasks", "raw", "--bootstrap", args.bootstrap]
        command += ["--input", source, "--output", sink, "--workload", "w1" if workload == "w1" else "w2"]
        return [*command, "--partitions", str(args.partitions), "--name", name], []
    sets = {"millstream-tuned": list(args.set or TUNED), "millstream-eos": list(EOS)}.get(contender, [])
    config = job_properties(name, workdir, args.bootstrap, workload, source, sink, sets)
    millstream = [sys.executable, "-c", "from millstream.cli.main import main; main()", "run", str(config), "-q"]
    if args.job_verbose:
        millstream.append("-v")
    return millstream + ([] if contender == "millstream-spark" else ["--in-process"]), sets


def command_and_env(
    contender: str, args: argparse.Namespace, name: str, workdir: Path, workload: str, source: str, sink: str
) -> tuple[list[str], list[str], dict[str, str]]:
    """The contender's command line, its config overrides (millstream's) and the environment it adds (peers')."""
    if contender not in PEERS:
        return (*contender_command(contender, args, name, workdir, workload, source, sink), {})
    if workload not in peer(contender).workloads or workload == "w2-blob":
        raise NotRunnableError(f"{contender} has no {workload} job")
    (workdir / "peer").mkdir()
    command, env = peer_command(contender, args, name, workdir, workload, source, sink)
    return command, [], env


def commit_ms(sets: list[str]) -> int:
    """The commit interval ``sets`` give the job (``task.commit.ms``, 100 ms by default under exactly-once)."""
    values = {key.strip(): value.strip() for key, _, value in (s.partition("=") for s in sets)}
    if "task.commit.ms" in values:
        return int(values["task.commit.ms"])
    return EOS_COMMIT_MS if values.get("task.processing.guarantee") == "exactly-once" else DEFAULT_COMMIT_MS


def distinct_commits(times_ns: list[int], apart_ns: int = 50_000_000) -> list[int]:
    """One time per commit: a container's tasks write their checkpoint records within a few ms."""
    commits: list[int] = []
    for when in sorted(times_ns):
        if not commits or when - commits[-1] > apart_ns:
            commits.append(when)
    return commits


def checkpoint_times_ns(bootstrap: str, job_name: str) -> list[int]:
    """Write times of the job's checkpoint records: when millstream committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=30).topics if t.startswith(f"__millstream-checkpoint-{job_name}")]
    times: list[int] = []
    for topic in topics:
        partitions = admin.list_topics(topic=topic, timeout=30).topics[topic].partitions
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": f"latency-ckpt-{topic}", "enable.partition.eof": True}
        )
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        ended: set[int] = set()
        deadline = time.monotonic() + 30
        while len(ended) < len(partitions) and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        ended.add(message.partition() or 0)
                    continue
                times.append(message.timestamp()[1] * 1_000_000)
        consumer.close()
    return sorted(times)


def stop_process(process: subprocess.Popen[bytes], grace: float = 90.0) -> int | None:
    """SIGTERM (millstream commits first), then the whole process group killed after ``grace`` seconds."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    with contextlib.suppress(ProcessLookupError):  # leftovers (Spark's JVM, its Python workers)
        os.killpg(process.pid, signal.SIGKILL)
    return process.returncode


def measure(contender: str, workload: str, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    name = f"lat-{RUN_ID}-{contender}-{workload}"
    source, sink = f"{name}-in", f"{name}-out"
    workdir = root / name
    workdir.mkdir()
    create_topic(args.bootstrap, source, args.partitions)
    create_topic(args.bootstrap, sink, args.partitions)
    command, sets, extra_env = command_and_env(contender, args, name, workdir, workload, source, sink)
    preload(args.bootstrap, source, args.state_keys)
    capacity = int(args.rate * (args.warmup + args.seconds)) + int(PROBE_RATE * args.startup_timeout) + 1000
    reader = Reader(args.bootstrap, sink, args.partitions, workload, capacity, args.keys, args.state_keys)
    ready, stop_watch = threading.Event(), threading.Event()
    producer = FixedRateProducer(args.bootstrap, source, args, ready)
    watcher = threading.Thread(
        target=output_has_records,
        args=(args.bootstrap, sink, args.partitions, ready, stop_watch, lambda: reader.preloaded() >= args.state_keys),
        daemon=True,
    )
    log = (args.logs / f"{name}.log").open("wb")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.update(extra_env)
    reader.start()
    started_ns = time.time_ns()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    watcher.start()
    producer.start()
    try:
        startup_deadline = time.monotonic() + args.startup_timeout
        while not ready.wait(0.2):
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited ({process.returncode}) before any output; see {log.name}")
            if time.monotonic() > startup_deadline:
                raise RuntimeError(f"{name} wrote nothing within --startup-timeout {args.startup_timeout} s")
        ready_ns = time.time_ns()
        while not producer.done.wait(0.2):
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited ({process.returncode}) while records were sent; see {log.name}")
        if producer.error is not None:
            raise producer.error
        sent = producer.sent
        deadline = time.monotonic() + args.deadline
        missing = reader.missing(sent)
        while missing and time.monotonic() < deadline and reader.is_alive():
            if process.poll() is not None:
                break
            time.sleep(0.2)
            missing = reader.missing(sent)
        if reader.error is not None:
            raise reader.error
        if missing:
            raise MissingRecordsError(
                f"{contender} {workload}: {missing:,} of {sent:,} records sent missing from {sink} "
                f"(read_committed) {args.deadline:.0f} s after the last send"
                + (
                    f"; the contender exited ({process.returncode}), see {log.name}"
                    if process.poll() is not None
                    else ""
                )
            )
    finally:
        producer.abort.set()
        stop_watch.set()
        returncode = stop_process(process, PEER_GRACE_S if contender in PEERS else 90.0)
        reader.stopping.set()
        reader.join(30)
        log.close()
    with reader.lock:
        data = reader.data
    measured = [
        (data.send_ns[i], data.latency_ns[i])
        for i in range(len(data.seq_of))
        if data.seq_of[i] >= producer.first_measured
    ]
    measured.sort()
    latencies = sorted(latency / 1e6 for _, latency in measured)
    stats = {label: percentile(latencies, q) for label, q in PERCENTILES}
    commits = distinct_commits(checkpoint_times_ns(args.bootstrap, name)) if contender.startswith("millstream") else []
    if data.wrong_counts:
        raise MissingRecordsError(f"{contender} {workload}: {data.wrong_counts:,} records with a wrong count")
    origin = producer.measured_start_ns
    result = {
        "contender": contender,
        "workload": workload,
        "overrides": sets,
        "commit_ms": commit_ms(sets) if contender.startswith("millstream") else None,
        "measured_records": len(measured),
        "records_sent": producer.sent,
        "duplicates": data.duplicates,
        "startup_seconds": (ready_ns - started_ns) / 1e9,
        "producer_behind_max_ms": producer.behind_max_ms,
        "exit_code": returncode,
        "latency_ms": stats,
        "commit_times_s": [(t - origin) / 1e9 for t in commits],
        "contender_start_s": (started_ns - origin) / 1e9,
        "series": bucketed_series(measured, origin),
        "log": log.name,
    }
    print(
        f"  {contender:<18} {workload}: {len(measured):,} records, "
        + "  ".join(f"{label} {value:,.1f} ms" for label, value in stats.items())
        + f"  (start-up {result['startup_seconds']:.1f} s, {len(commits)} commits, {data.duplicates} duplicates)",
        flush=True,
    )
    return result


def bucketed_series(measured: list[tuple[int, int]], origin: int, bucket_s: float = 0.1) -> dict[str, list[float]]:
    """Latency over send time in ``bucket_s`` buckets: each bucket's median and max (ms)."""
    buckets: dict[int, list[float]] = {}
    for sent, latency in measured:
        buckets.setdefault(int((sent - origin) / 1e9 / bucket_s), []).append(latency / 1e6)
    times, medians, maxima = [], [], []
    for index in sorted(buckets):
        values = sorted(buckets[index])
        times.append(round(index * bucket_s, 3))
        medians.append(round(percentile(values, 50), 3))
        maxima.append(round(values[-1], 3))
    return {"t_s": times, "p50_ms": medians, "max_ms": maxima}


def add_ratios(results: list[dict[str, Any]]) -> None:
    """Each figure over the raw loop's of the same workload in the same run (``ratio_to_raw``)."""
    for row in results:
        raw = next(
            (r for r in results if r["contender"] == "raw" and r["workload"] == row["workload"] and "error" not in r),
            None,
        )
        if "error" in row or raw is None:
            continue
        row["ratio_to_raw"] = {
            label: (value / raw["latency_ms"][label] if raw["latency_ms"][label] > 0 else None)
            for label, value in row["latency_ms"].items()
        }


def table(results: list[dict[str, Any]], workload: str) -> str:
    rows = [r for r in results if r["workload"] == workload]
    raw = next((r for r in rows if r["contender"] == "raw" and "error" not in r), None)
    header = f"{'contender':<18}" + "".join(f"{label + ' ms':>12}{'/raw':>8}" for label, _ in PERCENTILES)
    lines = [WORKLOAD_NAMES[workload], header]
    for row in rows:
        if "error" in row:
            lines.append(f"{row['contender']:<18}  not measured: {row['error']}")
            continue
        cells = ""
        for label, _ in PERCENTILES:
            value = row["latency_ms"][label]
            ratio = value / raw["latency_ms"][label] if raw and raw["latency_ms"][label] > 0 else math.nan
            cells += f"{value:>12,.1f}{ratio:>8.2f}"
        lines.append(f"{row['contender']:<18}{cells}")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], title: str, path: Path) -> bool:
    """Latency over time per contender, each millstream commit a vertical line; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    shown = [r for r in results if "error" not in r]
    if not shown:
        return False
    figure, axes = plt.subplots(len(shown), 1, figsize=(11, 2.3 * len(shown)), sharex=True, squeeze=False)
    for ax, row in zip(axes[:, 0], shown, strict=True):
        series = row["series"]
        ax.plot(series["t_s"], series["max_ms"], lw=0.7, color="#e57373", label="max per 100 ms")
        ax.plot(series["t_s"], series["p50_ms"], lw=0.9, color="#3f51b5", label="median per 100 ms")
        commits = [t for t in row["commit_times_s"] if series["t_s"] and -1 <= t <= series["t_s"][-1] + 120]
        if len(commits) > MAX_COMMIT_LINES:  # exactly-once commits every 100 ms: lines would hide the series
            ax.text(
                0.01,
                0.9,
                f"{len(commits)} commits, every {row['commit_ms']} ms: not drawn",
                fontsize=7,
                transform=ax.transAxes,
            )
            commits = []
        for index, when in enumerate(commits):
            ax.axvline(when, color="#444", lw=0.6, ls="--", label="commit (checkpoint written)" if index == 0 else None)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: ""))
        ax.set_ylabel("ms")
        ax.set_title(f"{row['contender']} — {WORKLOAD_NAMES[row['workload']]}", fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("send time, s since the measured window began (commits after it too)")
    figure.suptitle(title.replace("; tuned:", "\ntuned:"), fontsize=9)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.7 / figure.get_figheight()))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def warm_broker(bootstrap: str) -> None:
    """A first idempotent and transactional round trip, so the first contender does not pay for the broker's
    producer-id and transaction coordinators loading."""
    topic = f"lat-{RUN_ID}-warmup"
    create_topic(bootstrap, topic, 1)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    plain.produce(topic, b"warm-up")
    transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"lat-{RUN_ID}-warmup"})
    transactional.init_transactions(60)
    transactional.begin_transaction()
    transactional.produce(topic, b"warm-up")
    transactional.commit_transaction(60)
    for index in range(WARMUP_RECORDS):  # and some load, so the broker's JIT is warm before the first contender
        while True:
            try:
                plain.produce(topic, b"%d" % index, b"key-%d" % (index % 100))
                break
            except BufferError:
                plain.poll(0.01)
    if plain.flush(60) != 0:
        raise RuntimeError("the broker took no record within 60 s")
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "isolation.level": "read_committed"})
    reader.assign([TopicPartition(topic, 0, 0)])
    read, deadline = 0, time.monotonic() + 60
    while read < WARMUP_RECORDS + 1 and time.monotonic() < deadline:
        read += sum(1 for message in reader.consume(10_000, 0.2) if message.error() is None)
    reader.close()


def write_json(results: list[dict[str, Any]], title: str, args: argparse.Namespace) -> None:
    add_ratios(results)
    settings = {k: v for k, v in vars(args).items() if k not in ("out", "logs")}
    document = {"title": title, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "args": settings}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({**document, "results": results}, indent=1))


def run_all(args: argparse.Namespace, root: Path) -> None:
    if "w2-blob" in (args.workload or []):
        from tests.integration.blob_emulators import MotoS3Server

        with contextlib.ExitStack() as stack:
            server = MotoS3Server(root / "moto").start()
            stack.callback(server.stop)
            BLOB_ENDPOINT["url"] = server.endpoint_url
            _run_all(args, root)
        return
    _run_all(args, root)


def _run_all(args: argparse.Namespace, root: Path) -> None:
    warm_broker(args.bootstrap)
    spark = ("millstream-spark", "spark-ss", "spark-ss-min")
    contenders = args.contender or [c for c in CONTENDERS if not (args.no_spark and c in spark)]
    workloads = args.workload or ["w1", "w2"]
    title = (
        f"{args.rate:,} msg/s for {args.seconds:g} s (after {args.warmup:g} s warm-up), {args.partitions} partitions, "
        f"{args.keys:,} keys, {args.size} B values"
        + (f", {args.state_keys:,} keys of state preloaded" if args.state_keys else "")
        + f"; tuned: {' '.join(args.set or TUNED)}"
    )
    print(title, flush=True)
    results: list[dict[str, Any]] = []
    for workload in workloads:
        print(f"{WORKLOAD_NAMES[workload]}:", flush=True)
        for contender in contenders:
            try:
                results.append(measure(contender, workload, args, root))
            except (MissingRecordsError, RuntimeError) as error:  # NotRunnableError too
                if args.keep_going or contender in PEERS:
                    print(f"  {contender} {workload}: FAILED: {error}", flush=True)
                    results.append({"contender": contender, "workload": workload, "error": str(error)})
                else:
                    raise
            write_json(results, title, args)  # after each contender: an interrupted run still leaves its figures
    tables = "\n\n".join(table(results, w) for w in workloads)
    print(f"\n{title}\n(latency = read_committed read time - send time; /raw: the ratio to the raw loop's)\n")
    print(tables, flush=True)
    image = args.out.with_suffix(".png")
    if plot(results, title, image):
        print(f"\nwritten {args.out} and {image}", flush=True)
    else:
        print(f"\nwritten {args.out} (no plot: matplotlib is not installed; `make bench-latency` installs it)")
    failed = [r for r in results if "error" in r and r["contender"] not in PEERS]
    for row in results:
        if "error" in row and row["contender"] in PEERS:
            print(f"peer {row['contender']} {row['workload']} not measured: {row['error']}", flush=True)
    if failed:
        raise SystemExit(f"{len(failed)} measurement(s) failed: " + "; ".join(r["error"] for r in failed))


def delete_run_topics(bootstrap: str) -> None:
    """This run's topics (inputs, outputs, changelogs, checkpoints, metadata) off a broker that outlives it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=30).topics if f"lat-{RUN_ID}-" in t]
    if topics:
        for future in admin.delete_topics(topics).values():
            future.result(60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.latency",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 2)[2] if __doc__ else None,
    )
    parser.add_argument("--rate", type=int, default=1000, help="messages per second sent (default 1000)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per contender (default 20)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds at --rate before, excluded (default 5)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--size", type=int, default=100, help="bytes per value (default 100)")
    parser.add_argument(
        "--state-keys",
        type=int,
        default=0,
        help="records of distinct keys written to the input before each contender starts and read back before "
        "the warm-up (W2: that many keys of state; default 0)",
    )
    parser.add_argument(
        "--workload", action="append", choices=WORKLOADS, help="repeatable; default w1 and w2 (w2-blob: on request)"
    )
    parser.add_argument("--contender", action="append", choices=CONTENDERS, help="repeatable; default all")
    parser.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help=f"millstream-tuned's config overrides, repeatable (default: {' '.join(TUNED)})",
    )
    parser.add_argument("--no-spark", action="store_true", help="skip millstream-spark, spark-ss and spark-ss-min")
    parser.add_argument(
        "--deadline",
        type=float,
        default=150.0,
        help="seconds after the last send for every record to be read (default 150: two default commit intervals)",
    )
    parser.add_argument("--startup-timeout", type=float, default=240.0, help="seconds to the first output record")
    parser.add_argument("--keep-going", action="store_true", help="a failed contender is reported, not fatal")
    parser.add_argument("--job-verbose", action="store_true", help="millstream jobs log INFO lines (-v) to their logs")
    parser.add_argument("--bootstrap", help="an existing broker (default: start one from the test harness)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "latency.json")
    args = parser.parse_args(argv)
    for setting in args.set or []:
        if "=" not in setting:
            parser.error(f"--set {setting}: expected key=value")
    root = Path(tempfile.mkdtemp(prefix="millstream-latency-"))
    args.logs = Path(tempfile.mkdtemp(prefix="millstream-latency-logs-"))
    print(f"contenders' logs in {args.logs}", flush=True)
    try:
        if args.bootstrap:
            try:
                run_all(args, root)
            finally:
                delete_run_topics(args.bootstrap)
            return
        from tests.integration.kafka_broker import KafkaBroker

        with KafkaBroker(root / "broker", log_level="WARN") as broker:
            args.bootstrap = broker.bootstrap_servers
            print(f"broker at {broker.bootstrap_servers}", flush=True)
            run_all(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
