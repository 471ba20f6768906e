"""The spark-submit entry point refuses a submitted session it cannot run a job in safely, naming the --conf
to pass: it cannot change a running SparkContext's conf, only verify it."""

from __future__ import annotations

import pytest
from pyspark import SparkConf

from millstream.errors import ConfigError
from millstream.spark.submit import check_submitted_conf
from tests.helpers import job_config


def test_spark_submit_refuses_a_submitted_session_whose_task_retries_do_not_match_the_job(tmp_path):
    config = job_config(tmp_path, job__container__retry__count=5)
    conf = SparkConf(loadDefaults=False).setAll([("spark.master", "spark://cluster.example:7077")])
    with pytest.raises(ConfigError, match=r"--conf spark\.task\.maxFailures=6"):
        check_submitted_conf(conf, config)
    with pytest.raises(ConfigError, match=r"--conf spark\.speculation=false"):
        check_submitted_conf(conf.set("spark.speculation", "true"), config)
    check_submitted_conf(conf.set("spark.speculation", "false").set("spark.task.maxFailures", "6"), config)
