import pytest
from pyspark.sql import SparkSession

from millstream.config import Config
from millstream.spark.session import build_session

pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def spark_local() -> SparkSession:
    """One local-mode session for the Spark tests: 4 slots, failed tasks retried (local[4,4])."""
    session = build_session(Config({"job.container.retry.count": "3"}), master="local[4]")
    yield session
    session.stop()
