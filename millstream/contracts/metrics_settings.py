"""``metrics.``: the schema of the metrics keys, read by the metrics reporters and the runtime.

Read through the job's settings (``settings.view(...)``, ``millstream.config.settings``), which parse it once."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BeforeValidator, Field

from millstream.config.views import Bool, ConfigView, parse_stream, split_list
from millstream.errors import ConfigError
from millstream.model import SystemStream

MetricsReporterName = Literal["log", "snapshot"]


class MetricsConfig(ConfigView):
    """``metrics.*``: what a running job measures and where it shows it (see README, "Metrics")."""

    PREFIX: ClassVar[str] = "metrics."

    enabled: Bool | None = None
    """Measure at all; by default on exactly when the Prometheus port or a reporter is configured."""
    prometheus_port: int = Field(0, alias="prometheus.port", ge=0, le=65535)
    """The driver serves ``/metrics``, ``/status.json`` and ``/`` on this port; 0 = off."""
    prometheus_host: str = Field("0.0.0.0", alias="prometheus.host")
    """The address the driver's metrics server listens on."""
    snapshot_interval_ms: int = Field(5000, alias="snapshot.interval.ms", ge=10)
    """How often each container ships its metrics to the driver (and refreshes its lag)."""
    reporters: Annotated[list[MetricsReporterName], BeforeValidator(split_list)] = Field(default_factory=list)
    """``log``: a one-line summary per container every interval; ``snapshot``: a JSON snapshot per
    container every interval to ``metrics.reporter.snapshot.stream`` (Samza's MetricsSnapshotReporter).
    Snapshots for the driver are always shipped while metrics are on."""
    reporter_snapshot_stream: str | None = Field(None, alias="reporter.snapshot.stream")
    """The ``system.stream`` the ``snapshot`` reporter sends to, e.g. ``kafka.metrics``; each message is
    one container's snapshot as JSON, keyed by its container id."""

    @property
    def active(self) -> bool:
        if self.enabled is not None:
            return self.enabled
        return self.prometheus_port > 0 or bool(self.reporters)

    def snapshot_stream(self) -> SystemStream | None:
        """Where the ``snapshot`` reporter sends; None when it is not configured."""
        if "snapshot" not in self.reporters:
            return None
        if self.reporter_snapshot_stream is None:
            raise ConfigError(
                "config key 'metrics.reporters' includes 'snapshot': set metrics.reporter.snapshot.stream too "
                "(the system.stream it sends to, e.g. kafka.metrics)"
            )
        return parse_stream(self.reporter_snapshot_stream, "metrics.reporter.snapshot.stream")
