import pytest
from pyspark.sql import SparkSession

from millstream.config import Config
from millstream.spark.session import build_session

pytestmark = pytest.mark.spark


@pytest.fixture
def spark_local() -> SparkSession:
    """The shared local-mode session: 4 slots, failed tasks retried (local[4,4]).

    Got (or created again) per test: a module that needs another master (the standalone cluster)
    stops the active session, and the next test must not receive a stopped one.
    """
    return build_session(Config({"job.container.retry.count": "3"}), master="local[4]")
