"""The enrichment example on the Spark runner: a CDC-fed adjunct store applies inserts, updates and
deletes, and a running job switches to a catalog version bulk-built with Spark between two batches."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_clicks_carry_the_latest_profile_and_the_catalog_version_served_when_they_were_read(
    example, spark_local, tmp_path, capsys
):
    run = example("enrichment")

    assert run.main(["--data-dir", str(tmp_path / "data")], spark=spark_local) == 0
    assert "v2 user-1 gold     p3 Mug 8" in capsys.readouterr().out
