"""Marks every test by what it starts, so ``-m "not spark and not integration"`` (``make test-fast``) selects
exactly the tests that need no JVM and no server, whatever markers a test module remembered to set itself.

* ``integration``: everything under ``tests/integration/`` (a real Kafka broker, kinesalite, blob emulators).
* ``spark``: everything under ``tests/spark/`` and any test that asks for a Spark session fixture.

Markers a module sets itself (``pytestmark``, ``@pytest.mark.spark`` on a test that runs ``millstream run``
without ``--in-process``) still apply; this only adds the ones its location and fixtures imply.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from millstream.config.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TESTS = Path(__file__).parent

# Once a Spark Connect test ran, gRPC's client threads live in this process, and gRPC restarts them in every child
# forked with a ``preexec_fn`` (the servers' ``child_setup``) unless told not to. Such a child closes the inherited
# descriptors before its exec, gRPC's epoll descriptor among them, under those threads: gRPC then aborts the child
# (a moto server exited with -6 that way). Set before gRPC starts; its own Python fork support is off either way.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

# The fixtures that hand a test a SparkSession: the shared local-mode one and the per-module ones.
SPARK_FIXTURES = frozenset({"spark", "spark_local"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in implied_markers(item):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)


def implied_markers(item: pytest.Item) -> list[str]:
    """The markers ``item``'s place in ``tests/`` and its fixtures call for."""
    try:
        parts = item.path.relative_to(TESTS).parts
    except ValueError:  # a test collected from outside tests/ (a path given on the command line)
        parts = ()
    markers = []
    if parts[:1] == ("integration",):
        markers.append("integration")
    if parts[:1] == ("spark",) or SPARK_FIXTURES & set(getattr(item, "fixturenames", ())):
        markers.append("spark")
    return markers


@pytest.fixture
def spark_local() -> SparkSession:
    """The shared local-mode session: 4 slots, failed tasks retried (local[4,4]).

    Got (or created again) per test: a module that needs another master (the standalone cluster)
    stops the active session, and the next test must not receive a stopped one.
    """
    from millstream.spark.run.session import build_session

    return build_session(Settings({"job.container.retry.count": "3"}), master="local[4]")


@pytest.fixture
def spark(spark_local: SparkSession) -> SparkSession:
    """The shared session, under the name the modules that run on a standalone cluster override."""
    return spark_local
