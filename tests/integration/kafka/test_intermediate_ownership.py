"""An application's intermediate topics on the real broker are owned by the job that runs it (the cluster's
``__millstream-owners`` topic): a copied config with another ``job.name`` is refused, a takeover hands them over."""

from __future__ import annotations

import pytest

from millstream.config.settings import Settings
from millstream.contracts.systems import StreamOwnedError
from millstream.coordinator.services import DriverServices
from millstream.model import SystemStream
from millstream.operators.planner import ensure_intermediate_streams as ensure_streams
from tests.api.apps import app_config
from tests.helpers import create_stream


def ensure_intermediate_streams(config: Settings) -> dict[SystemStream, int]:
    """The planner's step with the driver's services, as the job coordinator takes it."""
    with DriverServices(config) as services:
        return ensure_streams(config, services.admin)


pytestmark = pytest.mark.integration


def kafka_app(tmp_path, bootstrap: str, app_id: str, **extra: str) -> Settings:
    return app_config(
        tmp_path,
        "tests.api.apps:WindowedCount",
        app__intermediate__system="kafka",
        app__id=app_id,
        app__name="views",
        systems__kafka__samza__factory="kafka",
        systems__kafka__bootstrap__servers=bootstrap,
        **extra,
    )


def test_a_second_job_is_refused_the_intermediate_topics_until_it_takes_them_over(tmp_path, bootstrap, topic_name):
    app_id = topic_name("owned")
    first = kafka_app(tmp_path, bootstrap, app_id, job__name="views")
    create_stream(first, "in", 2)
    create_stream(first, "out", 1)
    ensure_intermediate_streams(first)
    ensure_intermediate_streams(first)  # the owner again: a restart
    copy = kafka_app(tmp_path, bootstrap, app_id, job__name="views-copy")
    with pytest.raises(StreamOwnedError, match=f"stream 'kafka.views-{app_id}-by-user' is owned by job 'views-1'"):
        ensure_intermediate_streams(copy)
    ensure_intermediate_streams(
        kafka_app(tmp_path, bootstrap, app_id, job__name="views-copy", app__intermediate__owner__takeover="true")
    )
    with pytest.raises(StreamOwnedError, match="owned by job 'views-copy-1'"):
        ensure_intermediate_streams(first)
