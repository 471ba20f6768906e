"""``metrics.*``: a closed namespace, off by default, on with a port or a reporter."""

from __future__ import annotations

import pytest

from millstream.config.settings import Settings
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError


def test_metrics_are_off_unless_a_port_or_a_reporter_is_configured() -> None:
    defaults = Settings({}).view(MetricsConfig)
    assert (defaults.active, defaults.prometheus_port, defaults.snapshot_interval_ms) == (False, 0, 5000)
    assert Settings({"metrics.prometheus.port": "9404"}).view(MetricsConfig).active
    assert Settings({"metrics.reporters": "log"}).view(MetricsConfig).reporters == ["log"]
    assert Settings({"metrics.reporters": "log"}).view(MetricsConfig).active
    assert Settings({"metrics.enabled": "true"}).view(MetricsConfig).active
    assert not Settings({"metrics.enabled": "false", "metrics.reporters": "log"}).view(MetricsConfig).active


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"metrics.prometheus.prot": "9404"}, r"unknown config key 'metrics\.prometheus\.prot'.*prometheus\.port"),
        ({"metrics.prometheus.port": "70000"}, r"'metrics\.prometheus\.port' has invalid value"),
        ({"metrics.reporters": "log,graphite"}, r"'metrics\.reporters\.1' has invalid value 'graphite'"),
    ],
)
def test_a_bad_metrics_key_stops_the_job_before_it_starts(tmp_path, values: dict[str, str], message: str) -> None:
    config = Settings({"job.data.dir": str(tmp_path), "task.class": "tests.jobs:PassThrough", "task.inputs": "in"})
    with pytest.raises(ConfigError, match=message):
        prepare(config.with_overrides(values))


def test_a_misspelt_metrics_section_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'metrics\.prometheus\.port'"):
        prepare(Settings({"task.class": "tests.jobs:PassThrough", "task.inputs": "in", "metric.prometheus.port": "1"}))
