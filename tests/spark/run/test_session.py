"""The session a job runs in keeps Spark's reports of failed task attempts out of the user's terminal, unless
``millstream run -v`` asks for them: the runner reports a container's failure itself, once."""

from __future__ import annotations

from typing import Any

import pytest

from millstream.config.settings import Settings
from millstream.spark.run.session import FAILED_ATTEMPT_LOGGERS, build_session

pytestmark = pytest.mark.spark

LOGGERS = (*FAILED_ATTEMPT_LOGGERS[:2], "org.apache.spark.api.python.PythonRunner")


def levels(spark: Any) -> dict[str, str]:
    log_manager = spark.sparkContext._jvm.org.apache.logging.log4j.LogManager
    return {name: str(log_manager.getLogger(name).getLevel()) for name in LOGGERS}


def test_failed_attempt_loggers_are_off_by_default_and_at_spark_log_level_with_verbose(spark_local: Any) -> None:
    config = Settings({"job.container.retry.count": "3", "spark.log.level": "INFO"})
    assert set(levels(build_session(config, master="local[4]")).values()) == {"OFF"}
    assert set(levels(build_session(config, master="local[4]", verbose=True)).values()) == {"INFO"}
    build_session(Settings({"job.container.retry.count": "3"}), master="local[4]")  # the shared session's defaults
    assert set(levels(spark_local).values()) == {"OFF"}
