"""Containers as Spark tasks: the Spark runner's :class:`~millstream.coordinator.driver_loop.Launcher`.

A generation is one Spark job of one stage whose task ``i`` runs container ``i`` (``container_rdd``), submitted
from a thread of the driver so that the driver's loop keeps watching: where each container runs (affinity for
the next launch), whether its executor still lives (liveness) and the job's progress. Cancelling the job group
is the last resort past the stop timeout: it kills the Python workers without their final commit.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

import orjson
from pyspark.sql import SparkSession

from millstream.config import Config
from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.coordinator.driver_loop import Launch, LaunchOutcome
from millstream.job_model import JobModel
from millstream.runtime.container import ContainerResult
from millstream.spark.run.affinity import PlacementRecorder, container_rdd, launch_locations
from millstream.spark.run.container_task import container_partition
from millstream.spark.run.failures import describe_failure
from millstream.spark.run.liveness import LivenessMonitor
from millstream.spark.run.progress import SparkProgress
from millstream.spark.run.resources import ContainerResources, explain_memory_failure


@dataclass
class SparkLauncher:
    """Starts each generation's containers as the tasks of one Spark job."""

    spark: SparkSession
    config: Settings
    store: MetadataStore
    resources: ContainerResources
    status_url: str | None = None
    progress: SparkProgress | None = None
    verbose: bool = False

    def launch(self, model: JobModel) -> Launch:
        return _SparkLaunch(self, model)

    def explain(self, failure: str) -> str:
        return explain_memory_failure(failure, failure)


class _SparkLaunch:
    def __init__(self, launcher: SparkLauncher, model: JobModel) -> None:
        self.launcher = launcher
        self.generation = model.generation
        sc = launcher.spark.sparkContext
        self.group = f"millstream-{launcher.config.job.job_key}-g{model.generation}"
        count = len(model.containers)
        locations = launch_locations(sc, launcher.store, count)
        self.placements = PlacementRecorder(sc, launcher.store, self.group)
        self.liveness = LivenessMonitor(sc, launcher.store, self.group, launcher.config)
        self.result: dict[str, Any] = {}
        self.thread = threading.Thread(
            target=self._run, args=(model.to_bytes(), count, locations), name="millstream-spark-launch", daemon=True
        )
        self.thread.start()

    def _run(self, model: bytes, count: int, locations: dict[int, list[str]]) -> None:
        launcher = self.launcher
        sc = launcher.spark.sparkContext
        description = job_description(launcher.config, self.generation, count, launcher.status_url)
        sc.setJobGroup(self.group, description, interruptOnCancel=True)
        task = functools.partial(
            container_partition,
            launcher.config.to_dict(),
            launcher.config.source,
            model,
            _python_paths(launcher.config),
            os.environ.get("MILLSTREAM_LOG_LEVEL", "INFO"),
        )
        containers = launcher.resources.apply(
            container_rdd(sc, count, locations).setName(f"millstream containers 0-{count - 1}")
        )
        try:
            self.result["rows"] = containers.mapPartitionsWithIndex(task).collect()
        except Exception as error:
            self.result["error"] = describe_failure(error, sc, verbose=launcher.verbose)

    def wait(self, seconds: float) -> bool:
        self.thread.join(seconds)
        if self.launcher.progress is not None:
            self.launcher.progress.poll(self.generation)
        return self.thread.is_alive()

    def watch(self) -> None:
        self.placements.poll()
        self.liveness.poll(self.generation)

    def cancel(self) -> None:
        self.launcher.spark.sparkContext.cancelJobGroup(self.group)

    def outcome(self) -> LaunchOutcome:
        if self.launcher.progress is not None:  # the containers' last snapshots, written as they stopped
            self.launcher.progress.update(self.generation)
        results = [ContainerResult(**orjson.loads(row)) for row in self.result.get("rows", [])]
        return LaunchOutcome(results, self.result.get("error"))


def job_description(config: Settings, generation: int, containers: int, status: str | None = None) -> str:
    """What the Spark UI shows for the job: its name, generation and containers (task ``i`` of its one
    stage, partition ``i``, is container ``i``), and where its live progress is: a Spark job's description
    is fixed at submission, so it links millstream's status page (``metrics.prometheus.port``)."""
    plural = "" if containers == 1 else "s"
    link = f"; live progress: {status}" if status else ""
    return (
        f"millstream job {config.job.name} generation {generation}: {containers} container{plural} "
        f"(Spark partition i runs container i){link}"
    )


def _python_paths(config: Config) -> list[str]:
    """Directories workers need to import user code: the config's folder, cwd and the driver's source dirs."""
    paths = [os.path.dirname(config.source)] if config.source else []
    paths.append(os.getcwd())
    paths.extend(p for p in sys.path if p and os.path.isdir(p) and "site-packages" not in p and "/lib/python" not in p)
    seen: dict[str, None] = {}
    for path in paths:
        seen.setdefault(os.path.abspath(path), None)
    return list(seen)
