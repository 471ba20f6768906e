"""Sizing containers on Spark: their cores and memory as a stage-level resource profile, checked at start.

A container is one long-running Spark task; by default it takes ``spark.task.cpus`` cores of an executor and shares
the executor's memory with whatever else runs there. ``job.container.cpus`` and ``job.container.memory.mb`` make
the container's needs explicit:

* the RocksDB budget of its stores (``millstream.storage.memory``) plus ``job.container.python.memory.mb`` must
  fit in ``job.container.memory.mb``, else the job is refused at start (exit 2) with the figures, rather than
  killed hours later when the caches have filled;
* with dynamic allocation, the containers' stage runs under a resource profile whose executors have
  ``job.container.cpus`` cores and ``job.container.memory.mb`` of ``memoryOverhead`` (the non-JVM memory YARN
  and Kubernetes enforce, where the Python worker and RocksDB live), and tasks of ``job.container.cpus`` cpus;
* without it (Spark 3.4+ on standalone, YARN, Kubernetes), a task resource profile: each container takes
  ``job.container.cpus`` of the existing executors' cores, and the slot check counts slots of that size; the
  executors' memory is the cluster's to size, so the driver says what each container needs;
* in local mode Spark has no stage-level scheduling: the keys are not applied, and the driver says so.

``spark.executor.pyspark.memory`` is not used for the container: Spark turns it into an address-space limit
(``RLIMIT_AS``) of the executor's share per Python worker, which RocksDB's and the threads' reserved but unused
memory count against, so a container well within its real memory aborts natively ("terminate called ..."). When
it is set anyway, a share smaller than the container's budget is refused.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from pyspark import RDD, SparkConf, SparkContext
from pyspark.resource import ExecutorResourceRequests, ResourceProfile, ResourceProfileBuilder, TaskResourceRequests

from millstream.config.settings import Settings
from millstream.errors import ConfigError
from millstream.spark.run.session import dynamic_allocation, local_slots
from millstream.storage.memory import MIB, rocksdb_budget

log = logging.getLogger(__name__)

T = TypeVar("T")

_SIZE = re.compile(r"^\s*(?P<number>\d+)\s*(?P<unit>[kmgt]?b?)\s*$", re.IGNORECASE)
_UNIT_MB = {"": 1, "b": 1 / MIB, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def container_memory_need_mb(config: Settings) -> float:
    """What one container needs beside the JVM: its stores' RocksDB budget and the Python reserve."""
    return rocksdb_budget(config).total_mb + config.job.container_python_memory_mb


def check_container_memory(config: Settings) -> None:
    """Refuse a ``job.container.memory.mb`` that cannot hold the stores' RocksDB budget and the Python reserve."""
    job = config.job
    if job.container_memory_mb is None:
        return
    budget = rocksdb_budget(config)
    need = container_memory_need_mb(config)
    if need > job.container_memory_mb:
        raise ConfigError(
            f"job.container.memory.mb={job.container_memory_mb} cannot hold what a container's stores may use: "
            f"RocksDB {budget.total_mb:g} MiB ({budget.describe()}) + job.container.python.memory.mb="
            f"{job.container_python_memory_mb} = {need:g} MiB: raise job.container.memory.mb to at least "
            f"{int(need + 0.999)}, or bound RocksDB lower (stores.<s>.container.cache.size.bytes, "
            "stores.<s>.container.write.buffer.size.bytes x stores.<s>.rocksdb.num.write.buffers, or one "
            "limit for all stores with job.container.rocksdb.memory.mb)"
        )


def size_mb(text: str) -> float | None:
    """A Spark memory size (``512m``, ``1g``; a bare number is MiB) in MiB, or None when it does not parse."""
    match = _SIZE.match(text)
    if match is None:
        return None
    unit = match.group("unit").lower()
    return int(match.group("number")) * _UNIT_MB[unit if unit == "b" else unit.rstrip("b")]


def check_pyspark_memory(conf: SparkConf, config: Settings) -> None:
    """Refuse a ``spark.executor.pyspark.memory`` whose per-worker share is below what a container needs."""
    setting = conf.get("spark.executor.pyspark.memory")
    cores = conf.get("spark.executor.cores")
    if not setting or not cores:
        return
    total = size_mb(setting)
    if total is None:
        return
    share = total / max(int(cores), 1)
    need = container_memory_need_mb(config)
    if share < need:
        raise ConfigError(
            f"spark.executor.pyspark.memory={setting} gives each of an executor's {cores} Python workers "
            f"{share:g} MiB of address space (Spark divides it by spark.executor.cores), but a container needs "
            f"{need:g} MiB (RocksDB {rocksdb_budget(config).describe()}, job.container.python.memory.mb); RocksDB "
            "aborts natively beyond that limit: unset spark.executor.pyspark.memory and size the container with "
            "job.container.memory.mb and spark.executor.memoryOverhead instead"
        )


@dataclass(frozen=True)
class ContainerResources:
    """The resource profile the containers' stage runs under (None: Spark's default), and its cores per task."""

    profile: ResourceProfile | None
    task_cpus: int
    requests_executors: bool = False
    """The profile asks for executors of its own (dynamic allocation): Spark requests them when the containers'
    stage starts, so there are no slots of the profile to count before the launch."""

    def apply(self, rdd: RDD[T]) -> RDD[T]:
        return rdd if self.profile is None else rdd.withResources(self.profile)


def container_resources(sc: SparkContext, config: Settings) -> ContainerResources:
    """Check the container's memory against the session's settings and build its resource profile, if any."""
    job = config.job
    conf = sc.getConf()
    check_container_memory(config)
    check_pyspark_memory(conf, config)
    default_cpus = int(conf.get("spark.task.cpus") or "1")
    if job.container_cpus is None and job.container_memory_mb is None:
        return ContainerResources(None, default_cpus)
    cpus = job.container_cpus or default_cpus
    if local_slots(str(sc.master)) is not None:
        log.warning(
            "job.container.cpus / job.container.memory.mb are not applied on Spark master '%s': local mode has no "
            "stage-level scheduling (each container takes one of its threads); the memory budget was checked",
            sc.master,
        )
        return ContainerResources(None, 1)
    builder = ResourceProfileBuilder().require(TaskResourceRequests().cpus(cpus))
    if dynamic_allocation(conf):
        executor = ExecutorResourceRequests().cores(cpus)
        if job.container_memory_mb is not None:
            executor = executor.memoryOverhead(f"{job.container_memory_mb}m")
        builder = builder.require(executor)
    elif job.container_memory_mb is not None:
        log.warning(
            "job.container.memory.mb=%s: without dynamic allocation Spark cannot size executors per container; "
            "give each executor %s MiB of spark.executor.memoryOverhead per container it can hold "
            "(spark.executor.cores / job.container.cpus=%s)",
            job.container_memory_mb,
            job.container_memory_mb,
            cpus,
        )
    profile = builder.build
    _register(sc, profile)
    log.info("containers run under Spark resource profile %s: %s cpu(s) per container", profile.id, cpus)
    return ContainerResources(profile, cpus, requests_executors=dynamic_allocation(conf))


def executor_size(config: Settings) -> str:
    """The executor each container asks for under dynamic allocation, as the refusals name it."""
    job = config.job
    memory = f" and {job.container_memory_mb} MiB of memoryOverhead" if job.container_memory_mb is not None else ""
    keys = "job.container.cpus" + (", job.container.memory.mb" if job.container_memory_mb is not None else "")
    return f"an executor of {job.container_cpus} core(s){memory} ({keys})"


def check_dynamic_allocation_sizing(conf: Mapping[str, str] | SparkConf, config: Settings) -> None:
    """Refuse, before Spark is asked for any executor, a job whose containers' executors the submitted settings
    cannot start: under dynamic allocation each container runs on an executor of its own, of
    ``job.container.cpus`` cores, which Spark requests only once the containers' stage waits for it, and a request
    no worker can satisfy leaves the stage pending forever, with no message.

    Reads only the settings (``conf``: the session's or the ``spark.*`` keys a session will get), so the refusal
    comes before the session exists. What only the cluster knows (its workers' sizes) is checked once the session
    is up, by :func:`await_container_executors`."""
    settings = dict(conf.getAll()) if isinstance(conf, SparkConf) else dict(conf)
    job = config.job
    master = settings.get("spark.master") or ""
    enabled = (settings.get("spark.dynamicAllocation.enabled") or "false").lower() == "true"
    if not enabled or job.container_cpus is None or local_slots(master) is not None:
        return
    cpus, containers = job.container_cpus, job.container_count
    need = executor_size(config)
    cores_max = settings.get("spark.cores.max")
    if cores_max is not None and int(cores_max) < cpus * containers:
        raise ConfigError(
            f"spark.cores.max={cores_max} lets the application hold {cores_max} core(s) on master '{master}', but "
            f"with dynamic allocation each of the job's {containers} container(s) needs {need}, "
            f"{cpus * containers} core(s) in all: raise spark.cores.max to at least {cpus * containers}, or lower "
            "job.container.cpus / job.container.count"
        )
    maximum = settings.get("spark.dynamicAllocation.maxExecutors")
    if maximum is not None and int(maximum) < containers:
        raise ConfigError(
            f"spark.dynamicAllocation.maxExecutors={maximum}, but with dynamic allocation each of the job's "
            f"{containers} container(s) needs {need}: raise spark.dynamicAllocation.maxExecutors to at least "
            f"{containers}, or lower job.container.count"
        )


def await_container_executors(
    sc: SparkContext,
    resources: ContainerResources,
    config: Settings,
    wait_seconds: float,
    stop: threading.Event | None = None,
) -> None:
    """Under dynamic allocation, have Spark start an executor of the containers' profile before the containers
    are launched, and refuse (exit 2, naming the executor size needed) when none starts within ``wait_seconds``.

    Spark requests such executors only for a stage that waits for them, and a size no worker (host, node) offers,
    ``job.container.cpus=2`` on 1-core workers, leaves that stage pending forever without a word. So a probe stage
    of one no-op task per container runs under the profile first; it finishes as soon as an executor of that size
    registers, and is cancelled when none does. Its executors are the ones the containers then run on. A ``stop``
    set meanwhile (a signal) cancels the probe and returns at once: the runner then stops before launching."""
    if not resources.requests_executors:
        return
    containers = config.job.container_count
    group = f"millstream-executor-probe-{os.getpid()}-{threading.get_ident()}"
    outcome: dict[str, BaseException] = {}

    def probe() -> None:
        sc.setJobGroup(group, "millstream: waiting for executors of the containers' resource profile", True)
        try:
            resources.apply(sc.parallelize(range(containers), containers)).collect()
        except BaseException as error:  # handed to the waiting thread
            outcome["error"] = error

    thread = threading.Thread(target=probe, name="millstream-executor-probe", daemon=True)
    thread.start()
    deadline = time.monotonic() + wait_seconds
    while thread.is_alive() and time.monotonic() < deadline and not (stop is not None and stop.is_set()):
        thread.join(0.2)
    if stop is not None and stop.is_set() and thread.is_alive():
        sc.cancelJobGroup(group)
        return
    if not thread.is_alive():
        if "error" in outcome:
            raise outcome["error"]
        return
    sc.cancelJobGroup(group)
    thread.join(30)
    raise ConfigError(
        f"Spark master '{sc.master}' started no executor for the containers within {wait_seconds:g}s: with "
        f"dynamic allocation each container needs {executor_size(config)}, and no worker of the cluster offers "
        f"that much: give each worker (host, node) at least {config.job.container_cpus} core(s), or "
        "lower job.container.cpus to what one worker offers; if executors are only slow to start, wait longer "
        "with job.coordinator.slots.wait.ms"
    )


def _register(sc: SparkContext, profile: ResourceProfile) -> None:
    """Make the profile known to Spark's scheduler before any RDD uses it, so the slot check can count its slots."""
    java_profile = profile._java_resource_profile
    assert java_profile is not None, "a profile built with a running SparkContext has its JVM object"
    sc._jsc.sc().resourceProfileManager().addResourceProfile(java_profile)


_MEMORY_CAUSES = (
    (re.compile(r"\bMemoryError\b"), "the Python worker ran out of memory (MemoryError)"),
    (re.compile(r"std::bad_alloc"), "a native allocation failed (std::bad_alloc)"),
    (
        re.compile(r"terminate called (without an active exception|after throwing)"),
        "a native abort (C++ terminate), the way RocksDB fails when an allocation is refused, e.g. under "
        "spark.executor.pyspark.memory's address-space limit",
    ),
    (re.compile(r"Cannot allocate memory|\bENOMEM\b", re.IGNORECASE), "an allocation was refused (ENOMEM)"),
    (re.compile(r"java\.lang\.OutOfMemoryError"), "the executor's JVM ran out of heap (OutOfMemoryError)"),
    (
        re.compile(r"exceeding (physical )?memory limits|OOMKilled|exit code:? 137|exitCode: 137", re.IGNORECASE),
        "the cluster manager killed the executor for exceeding its memory limit",
    ),
)


def memory_cause(text: str) -> str | None:
    """Whether a failure's text shows a memory cause, and which: the runner prefixes its error with it."""
    for pattern, cause in _MEMORY_CAUSES:
        if pattern.search(text):
            return cause
    return None


def explain_memory_failure(message: str, failure: BaseException | str) -> str:
    """``message`` led by the memory cause found in the whole failure (its text, Spark's and the worker's), with
    what to change; unchanged when memory is not the cause."""
    cause = memory_cause(str(failure))
    if cause is None:
        return message
    return (
        f"out of memory: {cause}; size containers with job.container.memory.mb (and the executors' "
        f"spark.executor.memoryOverhead), bound RocksDB with job.container.rocksdb.memory.mb or the stores' "
        f"container.cache.size.bytes / container.write.buffer.size.bytes\n{message}"
    )
