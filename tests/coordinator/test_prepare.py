"""``prepare``: a misspelt section of millstream's is an unknown key, not the user's own namespace."""

from __future__ import annotations

import pytest

from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from tests.config.test_views import stubbed


@pytest.mark.parametrize(
    ("key", "meant"),
    [("jobs.name", "job.name"), ("system.log.path", "systems.log.path"), ("store.s.factory", "stores.s.factory")],
)
def test_a_misspelt_section_is_refused_naming_the_section_it_resembles(key: str, meant: str) -> None:
    section = key.partition(".")[0]
    with pytest.raises(
        ConfigError, match=rf"unknown config key '{key}': no section '{section}\.'; did you mean '{meant}'"
    ):
        prepare(stubbed({key: "x"}))


def test_sections_unlike_millstreams_stay_the_users_own() -> None:
    prepare(stubbed({"spark.executor.memory": "1g", "test.delay.seconds": "0.1", "myapp.threshold": "3"}))
