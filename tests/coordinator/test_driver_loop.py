"""The driver's loop on its own, with a launcher of this test's making: what it does with restart requests,
deterministic failures, stops, deadlines and containers that will not stop. Both runners' own tests run it
with real containers (threads here, Spark tasks in tests/spark)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from millstream.composition.metadata import metadata_store
from millstream.config.settings import Settings
from millstream.contracts import coordination
from millstream.coordinator.driver_loop import DriverLoop, LaunchOutcome
from millstream.job_model import JobModel
from millstream.runtime.container import ContainerResult
from tests.helpers import create_stream, job_config


class ScriptedLaunch:
    """Containers that run until asked to stop (through the metadata store, as real ones are), unless they
    ignore it; ``during`` runs once the launch started, to act as an operator or a failing container would."""

    def __init__(self, launcher: ScriptedLauncher, model: JobModel) -> None:
        self.launcher = launcher
        self.generation = model.generation
        self.cancelled = False
        self.watched = 0
        launcher.during(launcher, model.generation)

    def wait(self, seconds: float) -> bool:
        time.sleep(min(seconds, 0.01))  # a container's own work, not synchronisation: the loop polls the store
        stopped = coordination.stop_requested(self.launcher.store, self.generation)
        return not self.cancelled and not (stopped and not self.launcher.ignore_stop)

    def watch(self) -> None:
        self.watched += 1

    def cancel(self) -> None:
        self.cancelled = True

    def outcome(self) -> LaunchOutcome:
        result = ContainerResult(
            container_id="0",
            generation=self.generation,
            epoch=1,
            outcome="stopped",
            processed={},
            commits=0,
            dropped_deserialization_errors=0,
            seconds=0.0,
            processing_seconds=0.0,
        )
        return LaunchOutcome([result], self.launcher.error)


class ScriptedLauncher:
    def __init__(self, config: Settings, during=lambda launcher, generation: None, *, ignore_stop=False, error=None):
        self.store = metadata_store(config)
        self.during = during
        self.ignore_stop = ignore_stop
        self.error: str | None = error
        self.launches: list[ScriptedLaunch] = []

    def launch(self, model: JobModel) -> ScriptedLaunch:
        self.launches.append(ScriptedLaunch(self, model))
        return self.launches[-1]

    def explain(self, failure: str) -> str:
        return f"explained: {failure}"


def loop_config(tmp_path: Path, **extra: str) -> Settings:
    config = Settings.of(job_config(tmp_path, job__container__count="1", **extra))
    create_stream(config, "in", 1)
    return config


def test_a_restart_request_stops_the_generation_and_starts_the_next_one(tmp_path: Path) -> None:
    config = loop_config(tmp_path)

    def restart_once(launcher: ScriptedLauncher, generation: int) -> None:
        if len(launcher.launches) == 0:
            coordination.request_restart(launcher.store, "startpoints changed")
        else:
            coordination.request_stop(launcher.store, generation)  # the second generation ends by itself

    launcher = ScriptedLauncher(config, restart_once)
    result = DriverLoop(config, launcher.store, launcher).run()
    assert [launch.generation for launch in launcher.launches] == [1, 2]
    assert result.generation == 2 and len(result.containers) == 2
    assert coordination.restart_requested(launcher.store) is None, "the request is consumed"


def test_a_deterministic_failure_stops_the_containers_and_fails_the_job_with_its_explained_message(
    tmp_path: Path,
) -> None:
    config = loop_config(tmp_path)

    def fail(launcher: ScriptedLauncher, generation: int) -> None:
        launcher.store.put(
            coordination.JOB_COORDINATOR_NAMESPACE,
            coordination.FAILED_KEY,
            b'{"generation": %d, "container": "0", "attempt": 1, "message": "boom at offset 7"}' % generation,
        )

    launcher = ScriptedLauncher(config, fail)
    result = DriverLoop(config, launcher.store, launcher).run()
    assert result.outcome == "failed" and result.error == "explained: boom at offset 7"
    assert len(launcher.launches) == 1 and coordination.stop_requested(launcher.store, 1)


def test_a_container_error_fails_the_job_and_asks_the_others_to_stop(tmp_path: Path) -> None:
    config = loop_config(tmp_path)
    launcher = ScriptedLauncher(
        config, lambda launcher, generation: coordination.request_stop(launcher.store, generation), error="container 0"
    )
    result = DriverLoop(config, launcher.store, launcher).run()
    assert result.outcome == "failed" and result.error == "container 0"


def test_the_deadline_stops_the_containers_and_they_are_watched_meanwhile(tmp_path: Path) -> None:
    config = loop_config(tmp_path)
    launcher = ScriptedLauncher(config)
    stop = threading.Event()
    DriverLoop(config, launcher.store, launcher, stop).run(deadline=time.monotonic() + 0.3)
    assert stop.is_set() and coordination.stop_requested(launcher.store, 1)
    assert launcher.launches[0].watched >= 1 and not launcher.launches[0].cancelled


def test_containers_that_outlive_the_stop_timeout_are_cancelled(tmp_path: Path) -> None:
    config = loop_config(tmp_path, job__coordinator__stop__timeout__ms="100")
    stop = threading.Event()
    launcher = ScriptedLauncher(config, lambda launcher, generation: stop.set(), ignore_stop=True)
    result = DriverLoop(config, launcher.store, launcher, stop).run()
    assert launcher.launches[0].cancelled
    assert result.generation == 1


def test_a_stop_before_any_container_started_launches_nothing(tmp_path: Path) -> None:
    config = loop_config(tmp_path)
    launcher = ScriptedLauncher(config)
    stop = threading.Event()
    stop.set()
    result = DriverLoop(config, launcher.store, launcher, stop).run()
    assert result.outcome == "stopped" and launcher.launches == []
