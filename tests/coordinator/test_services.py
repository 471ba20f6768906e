"""``DriverServices``: a driver opens each system's admin once and one metadata-store connection per thread that
needs one, however many steps use them, and closes them all at the end.

Openings are counted through our own seams: a system factory registered under ``systems.<s>.samza.factory`` and
a metadata-store factory under ``metadata.store.factory``, each recording the thread that asked."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

import pytest

from millstream import Job, JobResult
from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.coordinator.services import DriverServices
from millstream.embedded.log.admin import LogSystemAdmin
from millstream.embedded.log.factory import LogSystemFactory
from millstream.embedded.sqlite import SqliteMetadataStoreFactory
from millstream.errors import MillstreamError
from millstream.model import SystemStream
from millstream.startpoint import StartpointOldest
from millstream.testing import InProcessRunner
from tests.helpers import wait_until

HERE = "tests.coordinator.test_services"
SYSTEMS = ("log", "side")

_lock = threading.Lock()
admins_opened: Counter[tuple[str, str]] = Counter()
"""(thread name, system) -> admins created."""
admins_stopped: Counter[tuple[str, str]] = Counter()
stores_opened: Counter[str] = Counter()
"""thread name -> metadata stores created."""


def record(config: Settings, kind: str, what: str = "") -> None:
    """Also to ``test.count.file`` when set: a job run as a command counts in a process of its own."""
    path = config.get("test.count.file")
    if path:
        with open(path, "a", encoding="utf-8") as file:
            file.write(f"{kind} {threading.current_thread().name} {what}\n")


class CountingLogSystemFactory(LogSystemFactory):
    def get_admin(self, system_name: str, config: Settings) -> LogSystemAdmin:
        admin = super().get_admin(system_name, config)
        record(config, "admin", system_name)
        with _lock:
            admins_opened[(threading.current_thread().name, system_name)] += 1
        stop = admin.stop

        def counted_stop() -> None:
            with _lock:
                admins_stopped[(threading.current_thread().name, system_name)] += 1
            stop()

        admin.stop = counted_stop  # type: ignore[method-assign]
        return admin


class CountingSqliteFactory(SqliteMetadataStoreFactory):
    def get_metadata_store(self, config: Settings) -> MetadataStore:
        record(config, "store")
        with _lock:
            stores_opened[threading.current_thread().name] += 1
        return super().get_metadata_store(config)


def two_system_job(data_dir: Path, **extra: Any) -> dict[str, Any]:
    """``PassThrough`` reading ``log.in`` and ``side.extra``: two systems (two log systems share one directory,
    so the stream names differ), both opened through the counting factory."""
    values = {
        "job.name": "services",
        "job.data.dir": str(data_dir),
        "job.container.count": "2",
        "task.class": "tests.jobs:PassThrough",
        "task.inputs": "log.in,side.extra",
        "task.commit.ms": "200",
        "metadata.store.factory": f"{HERE}:CountingSqliteFactory",
    }
    for system in SYSTEMS:
        values[f"systems.{system}.samza.factory"] = f"{HERE}:CountingLogSystemFactory"
        values[f"systems.{system}.samza.offset.default"] = "oldest"
        values[f"systems.{system}.samza.key.serde"] = "string"
        values[f"systems.{system}.samza.msg.serde"] = "json"
    return {**values, **extra}


def with_sealed_inputs(job: Job, *, sealed: bool = True) -> None:
    job.streams.create("log.in", 2)
    job.streams.create("side.extra", 1)
    job.streams.create("log.out", 1)
    job.streams.write("log.in", [("a", 1), ("b", 2)])
    job.streams.write("side.extra", [("c", 3)])
    if sealed:
        job.streams.seal("log.in")
        job.streams.seal("side.extra")


def reset_counts() -> None:
    with _lock:
        admins_opened.clear()
        admins_stopped.clear()
        stores_opened.clear()


def driver_counts(thread: str | None = None) -> tuple[dict[tuple[str, str], int], dict[str, int]]:
    """Openings of ``thread`` (all but the containers' threads, ``container-<id>``, which open their own)."""
    with _lock:
        admins = {k: n for k, n in admins_opened.items() if (thread or k[0]) == k[0] and "container-" not in k[0]}
        stores = {k: n for k, n in stores_opened.items() if (thread or k) == k and "container-" not in k}
    return admins, stores


@pytest.fixture(autouse=True)
def _counts() -> None:
    reset_counts()


class Runner(Protocol):
    def run(self) -> JobResult: ...

    def request_stop(self) -> None: ...


def run_two_generations(job: Job, runner: Runner) -> JobResult:
    """Run ``runner`` on a thread named ``driver`` through a restart (a startpoint applied: a second generation
    planned, the first one's writers fenced), then stop it; its result."""
    outcome: list[JobResult] = []
    driver = threading.Thread(target=lambda: outcome.append(runner.run()), name="driver")
    driver.start()
    try:
        out = SystemStream("log", "out")
        wait_until(lambda: len(job.streams.read(out, idle_timeout=0.2).get(0, [])) == 3, 120, "the input processed")
        job.startpoints.set("log.in", StartpointOldest(), apply=True)
        wait_until(lambda: job.status().generation == 2, 120, "the restart published generation 2")
        wait_until(lambda: len(job.streams.read(out, idle_timeout=0.2).get(0, [])) == 5, 120, "log.in read again")
    finally:
        runner.request_stop()
        driver.join()
    return outcome[0]


def assert_one_admin_per_system_on_the_driver(*, own_connection: bool) -> None:
    """One admin per system on the driver's thread, stopped once; its metadata-store connections: its own (unless
    the runner opened it on the thread that built it) and each of the two generations' heartbeat's, which a beat
    waiting for the store's write lock must not share with the driver's liveness reads."""
    admins, stores = driver_counts(thread="driver")
    assert admins == {("driver", "log"): 1, ("driver", "side"): 1}
    assert stores == {"driver": (1 if own_connection else 0) + 2}
    assert admins_stopped[("driver", "log")] == admins_stopped[("driver", "side")] == 1, "closed with the run"


def test_a_run_of_two_generations_opens_each_systems_admin_once_on_the_driver_and_one_store_per_driver_thread(
    tmp_path,
):
    """Each step of a run (validation, each generation's plan, fencing the previous generation's writers) uses
    the driver's admins, so each system's admin is opened once for the whole run."""
    job = Job(two_system_job(tmp_path))
    with_sealed_inputs(job, sealed=False)
    reset_counts()

    result = run_two_generations(job, InProcessRunner(job.config))

    assert result.outcome == "stopped", result.error
    assert_one_admin_per_system_on_the_driver(own_connection=True)


def test_a_job_used_as_a_context_manager_shares_one_admin_per_system_between_its_calls_and_its_run(tmp_path):
    with Job(two_system_job(tmp_path)) as job:
        with_sealed_inputs(job)
        job.model()
        job.status()
        result = job.run("in-process", timeout=60)
        job.status()
        admins, stores = driver_counts()

    assert result.outcome == "finished", result.error
    main = threading.current_thread().name
    assert admins == {(main, "log"): 1, (main, "side"): 1}
    assert stores == {main: 2}
    assert admins_stopped[(main, "log")] == admins_stopped[(main, "side")] == 1, "leaving the block stopped each"


def test_a_job_used_call_by_call_holds_no_admin_between_calls(tmp_path):
    job = Job(two_system_job(tmp_path))
    with_sealed_inputs(job)
    assert job.run("in-process", timeout=60).outcome == "finished"
    reset_counts()

    job.status()

    main = threading.current_thread().name
    with _lock:
        assert admins_opened == {(main, "log"): 1, (main, "side"): 1}, "the status read both systems' lag"
        assert admins_stopped == admins_opened, "and stopped their admins before returning"


def test_another_thread_gets_its_own_admin_and_connection_and_close_releases_every_one_once(tmp_path):
    services = DriverServices(Settings(two_system_job(tmp_path)))
    mine = (services.admin("log"), services.store())
    assert (services.admin("log"), services.store()) == mine, "the same thread gets the same ones again"
    theirs: list[object] = []
    other = threading.Thread(target=lambda: theirs.extend((services.admin("log"), services.store())), name="other")
    other.start()
    other.join()
    assert theirs[0] is not mine[0] and theirs[1] is not mine[1]

    services.close()
    services.close()

    assert admins_stopped == {("MainThread", "log"): 2}
    with pytest.raises(MillstreamError, match="job 'services': the driver's services are closed"):
        services.admin("side")
