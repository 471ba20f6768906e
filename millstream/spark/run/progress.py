"""A running job's progress where Spark users look, so Spark does not show a job that processes millions
of records as one stage of N tasks that never end and read one record each.

What Spark offers, and why this module takes what it takes:

- A job's description and group are fixed when the job is submitted, and a millstream generation is one
  job that runs for days: the description cannot carry live figures. It names the job, its generation and
  containers, and links millstream's status page (see :func:`status_url`).
- Accumulators updated by tasks reach the driver only when a task ends (a Python worker ships its updates
  with its result), which for a container is when it stops; a custom ``SparkListener`` or UI tab is JVM code.
- Spark's metrics system is live: a gauge registered on the driver is read at every scrape of its sinks and
  servlets (``/metrics/json`` on the Spark UI, the Prometheus servlet, JMX, Graphite, ...). The driver
  already reads the containers' metrics snapshots from the metadata store; :class:`SparkProgress` mirrors
  the job's totals into driver-side gauges there, named ``millstream.<job key>.<figure>``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from millstream.config.settings import Settings
from millstream.contracts.metadata import MetadataStore
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.contracts.metrics_snapshot import ContainerSnapshot, current_snapshots
from millstream.errors import MillstreamError

if TYPE_CHECKING:
    from pyspark import SparkContext

log = logging.getLogger(__name__)

FIGURES = ("lag", "records_per_second", "containers_reporting", "processed")
"""In the order :meth:`SparkProgress.update` sets them: ``processed`` last, so a scrape (which reads each gauge
on its own) that sees a reading's count sees that reading's other figures, or newer ones, beside it."""
_WILDCARD_HOSTS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class Progress:
    """The job's totals as of its containers' last snapshots."""

    processed: int
    """Records processed by the generation's containers since each started (a restarted container counts anew)."""
    lag: int
    """Records behind the inputs' ends, summed over every input partition."""
    records_per_second: int
    """Processed records per second between this and the previous reading; 0 at the first reading."""
    containers_reporting: int
    written_ms: int
    """The newest snapshot's write time (0: no container has reported yet)."""


def progress_of(snapshots: list[ContainerSnapshot], previous: Progress | None) -> Progress:
    """Totals over ``snapshots`` (the same sums as the status document's per-task figures); the rate is
    measured against ``previous`` on the snapshots' own clock, and is 0 when the count went back (a container
    restarted) or no snapshot is newer."""
    processed = lag = 0
    for snapshot in snapshots:
        for sample in snapshot.samples:
            if not any(name == "task" for name, _ in sample.labels):
                continue
            if sample.name == "processed":
                processed += int(sample.value)
            elif sample.name == "lag":
                lag += int(sample.value)
    written_ms = max((snapshot.written_ms for snapshot in snapshots), default=0)
    rate = 0
    if previous is not None and written_ms > previous.written_ms and processed >= previous.processed:
        rate = round((processed - previous.processed) * 1000 / (written_ms - previous.written_ms))
    return Progress(processed, lag, rate, len(snapshots), written_ms)


class SparkProgress:
    """Mirrors :func:`progress_of` into Spark's metrics system, every ``metrics.snapshot.interval.ms``."""

    def __init__(self, sc: SparkContext, config: Settings, store: MetadataStore) -> None:
        self.store = store
        self.interval = config.view(MetricsConfig).snapshot_interval_ms / 1000
        self.gauges = spark_gauges(sc, config.job.job_key)
        self.last: Progress | None = None
        self._generation = -1
        self._next = 0.0

    def poll(self, generation: int) -> None:
        """Update the gauges if an interval has passed since the last update."""
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.interval
            self.update(generation)

    def update(self, generation: int) -> Progress | None:
        """Read the snapshots and set the gauges; a store that cannot be read leaves them as they are (they
        are informational: the job goes on)."""
        if generation != self._generation:  # a new generation's containers count from zero
            self._generation, self.last = generation, None
        try:
            snapshots = current_snapshots(self.store, generation)
        except (MillstreamError, OSError) as error:
            log.warning("cannot read the containers' metrics for Spark's metrics system: %s", error)
            return None
        progress = progress_of(snapshots, self.last)
        try:
            for figure in FIGURES:
                self.gauges[figure].setValue(getattr(progress, figure))
        except Exception as error:  # py4j: Spark's JVM is going away (a stop), the job's own outcome says why
            log.debug("cannot set the progress gauges in Spark's metrics system: %s", error)
            return None
        self.last = progress
        return progress


_GAUGES: dict[tuple[str, str], Any] = {}
"""Per (Spark application, metric name): Spark's metrics system keeps the first source registered under a name,
so a job run again in the same session updates the gauges it registered the first time."""


def spark_gauges(sc: SparkContext, job_key: str) -> dict[str, Any]:
    """Driver-side ``LongAccumulator`` s, one per figure, registered in Spark's metrics system as gauges
    (``<app id>.driver.AccumulatorSource.millstream.<job key>.<figure>``)."""
    jvm = sc._jvm
    assert jvm is not None
    context = sc._jsc.sc()
    application = str(sc.applicationId)
    names = {figure: f"millstream.{job_key}.{figure}" for figure in FIGURES}
    missing = [name for name in names.values() if (application, name) not in _GAUGES]
    if missing:
        registered = jvm.java.util.HashMap()
        for name in missing:
            accumulator = context.longAccumulator(name)
            registered.put(name, accumulator)
            _GAUGES[(application, name)] = accumulator
        source = getattr(getattr(jvm.org.apache.spark.metrics.source, "LongAccumulatorSource$"), "MODULE$")
        source.register(context, jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(registered))
    return {figure: _GAUGES[(application, name)] for figure, name in names.items()}


def status_url(config: Settings, port: int, sc: SparkContext) -> str:
    """Where millstream's status page of the job is, for a link in the Spark UI: the metrics server's
    address, or the driver's host when it listens on every interface."""
    host = config.view(MetricsConfig).prometheus_host
    if host in _WILDCARD_HOSTS:
        host = sc.getConf().get("spark.driver.host") or "localhost"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"
