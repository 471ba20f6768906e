"""Who owns what a job writes, from the command line: a copied application config with another ``job.name`` is
refused the intermediate streams of the application it was copied from, in either runner, before Spark starts."""

from __future__ import annotations

import pytest

from millstream.coordinator.prepare import load_job_config
from millstream.model import SystemStream
from millstream.testing import write_stream
from tests.api.apps import user_messages
from tests.cli.test_main import millstream, write_config
from tests.cli.test_reset import APP, run_to_the_end
from tests.helpers import create_stream, seal


@pytest.mark.parametrize("mode", [["--in-process"], []], ids=["in-process", "spark"])
def test_a_copied_application_config_with_another_job_name_is_refused_its_intermediate_streams(tmp_path, mode):
    """The same app.name, so the same intermediate streams: refused at start with exit 2, before Spark starts."""
    path = write_config(tmp_path, {**APP, "app.name": "shared-app"})
    config = load_job_config(path)
    create_stream(config, "in", 2)
    create_stream(config, "out", 1)
    write_stream(config, SystemStream("log", "in"), user_messages(0, 3), partition=0)
    seal(config, "in")
    run_to_the_end(config)
    copy = write_config(tmp_path, {**APP, "app.name": "shared-app", "job.name": "cli-test-copy"}, name="copy.yaml")
    refused = millstream("run", copy, *mode)
    assert refused.returncode == 2, refused.stderr
    assert "stream 'log.shared-app-1-by-user' is owned by job 'cli-test-1'" in refused.stderr
    assert "app.intermediate.owner.takeover=true" in refused.stderr
    assert "log4j" not in refused.stderr, "refused before Spark's JVM started"
