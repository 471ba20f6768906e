"""Sizing containers: the memory check at start, memory causes named in failures, local mode said so."""

from __future__ import annotations

import logging

import pytest
from pyspark import SparkConf

from millstream import StreamTask
from millstream.config.settings import Settings
from millstream.coordinator.prepare import prepare
from millstream.errors import ConfigError
from millstream.spark.run.resources import (
    check_container_memory,
    check_dynamic_allocation_sizing,
    check_pyspark_memory,
    container_resources,
    explain_memory_failure,
    memory_cause,
    size_mb,
)
from millstream.spark.run.runner import SparkJobRunner
from millstream.storage.memory import MIB
from tests.helpers import create_stream, fill, job_config, seal

pytestmark = pytest.mark.spark

STORE = {"stores.counts.changelog": "log.counts-changelog"}  # Samza's defaults: 100 MiB cache + 3 x 32 MiB


def test_a_container_memory_that_cannot_hold_the_stores_rocksdb_budget_is_refused_naming_the_figures():
    config = Settings({**STORE, "job.container.memory.mb": "400"})
    with pytest.raises(ConfigError) as refused:
        check_container_memory(config)
    message = str(refused.value)
    assert "job.container.memory.mb=400" in message
    assert "RocksDB 196 MiB (store 'counts' 196 MiB)" in message
    assert "job.container.python.memory.mb=256 = 452 MiB" in message
    assert "at least 452" in message


def test_a_container_memory_that_holds_the_budget_passes_and_a_shared_limit_counts_once():
    check_container_memory(Settings({**STORE, "job.container.memory.mb": "452"}))
    shared = {**STORE, "stores.other.factory": "rocksdb", "job.container.rocksdb.memory.mb": "100"}
    check_container_memory(Settings({**shared, "job.container.memory.mb": "356"}))
    with pytest.raises(ConfigError, match="RocksDB 100 MiB"):
        check_container_memory(Settings({**shared, "job.container.memory.mb": "355"}))


def test_the_runner_refuses_an_undersized_container_before_starting_spark(tmp_path):
    config = job_config(
        tmp_path,
        **{
            "stores.counts.changelog": "log.counts-changelog",
            "job.container.memory.mb": "100",
            "job.shared.filesystem": "true",  # else the multi-host refusal of the log system comes first
        },
    )
    with pytest.raises(ConfigError, match=r"job\.container\.memory\.mb=100 cannot hold"):
        SparkJobRunner(config, master="no-such-master").run()


DYNAMIC = {
    "job.container.cpus": "2",
    "job.container.count": "2",
    "spark.master": "spark://cluster.example:7077",
    "spark.dynamicAllocation.enabled": "true",
}


def test_with_dynamic_allocation_too_few_cores_for_the_containers_executors_are_refused_naming_their_size():
    config = Settings({**DYNAMIC, "job.container.memory.mb": "1024"})
    with pytest.raises(ConfigError) as refused:
        check_dynamic_allocation_sizing({**DYNAMIC, "spark.cores.max": "3"}, config)
    message = str(refused.value)
    assert "spark.cores.max=3" in message
    assert "each of the job's 2 container(s) needs an executor of 2 core(s) and 1024 MiB of memoryOverhead" in message
    assert "raise spark.cores.max to at least 4" in message
    with pytest.raises(
        ConfigError, match=r"maxExecutors=1, .* needs an executor of 2 core\(s\) \(job\.container\.cpus\)"
    ):
        check_dynamic_allocation_sizing(
            SparkConf(loadDefaults=False).setAll([*DYNAMIC.items(), ("spark.dynamicAllocation.maxExecutors", "1")]),
            config.without("job.container.memory.mb"),
        )


def test_dynamic_allocation_sizing_passes_what_can_start_and_leaves_local_masters_and_static_executors_alone():
    config = Settings(DYNAMIC)
    check_dynamic_allocation_sizing(
        {**DYNAMIC, "spark.cores.max": "4", "spark.dynamicAllocation.maxExecutors": "2"}, config
    )
    check_dynamic_allocation_sizing({**DYNAMIC, "spark.master": "local[4]", "spark.cores.max": "1"}, config)
    check_dynamic_allocation_sizing(
        {**DYNAMIC, "spark.dynamicAllocation.enabled": "false", "spark.cores.max": "1"}, config
    )
    check_dynamic_allocation_sizing(
        {**DYNAMIC, "spark.cores.max": "1"}, Settings(DYNAMIC).without("job.container.cpus")
    )


def test_the_runner_refuses_dynamic_allocation_sizing_from_the_configs_spark_keys_before_starting_spark(tmp_path):
    config = job_config(
        tmp_path,
        job__container__cpus=2,
        job__shared__filesystem=True,  # else the multi-host refusal of the log system comes first
        spark__dynamicAllocation__enabled="true",
        spark__dynamicAllocation__maxExecutors=0,
    )
    with pytest.raises(ConfigError, match=r"spark\.dynamicAllocation\.maxExecutors=0"):
        SparkJobRunner(config, master="spark://127.0.0.1:9").run()  # nothing listens: a session would hang there


def test_spark_sizes_read_in_mib():
    assert size_mb("1g") == 1024
    assert size_mb("512m") == 512
    assert size_mb("2048") == 2048
    assert size_mb("1.5g") is None


def test_a_pyspark_memory_share_below_the_containers_need_is_refused_with_the_executor_cores_it_is_split_by():
    conf = SparkConf(loadDefaults=False).setAll(
        [("spark.executor.pyspark.memory", "1g"), ("spark.executor.cores", "4")]
    )
    with pytest.raises(ConfigError, match=r"each of an executor's 4 Python workers 256 MiB of address space"):
        check_pyspark_memory(conf, Settings(STORE))
    check_pyspark_memory(conf.set("spark.executor.cores", "2"), Settings(STORE))  # 512 MiB >= 452


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("terminate called without an active exception\nPython worker exited unexpectedly", "native abort"),
        ("Traceback ...\nMemoryError", "MemoryError"),
        ("what():  std::bad_alloc", "std::bad_alloc"),
        ("Container killed by YARN for exceeding physical memory limits", "exceeding its memory limit"),
        ("The executor with id 3 exited with exit code 137 (SIGKILL, possible container OOM)", "memory limit"),
        ("java.lang.OutOfMemoryError: Java heap space", "OutOfMemoryError"),
    ],
)
def test_a_failure_caused_by_memory_says_so(text, expected):
    cause = memory_cause(text)
    assert cause is not None and expected in cause
    explained = explain_memory_failure("job failed: Python worker exited unexpectedly (crashed)", text)
    assert explained.startswith("out of memory: ")
    assert "job.container.memory.mb" in explained
    assert explained.endswith("Python worker exited unexpectedly (crashed)")


def test_a_failure_not_caused_by_memory_is_left_as_it_is():
    message = "ValueError: poison at offset 3"
    assert memory_cause("Traceback\nValueError: poison at offset 3") is None
    assert explain_memory_failure(message, RuntimeError("ValueError: poison at offset 3")) == message


def test_local_mode_does_not_apply_container_cpus_and_memory_and_says_so(spark_local, caplog):
    config = Settings({**STORE, "job.container.cpus": "2", "job.container.memory.mb": "1024"})
    with caplog.at_level(logging.WARNING, logger="millstream.spark.run.resources"):
        resources = container_resources(spark_local.sparkContext, config)
    assert resources.profile is None
    assert "are not applied on Spark master 'local" in caplog.text
    assert "no stage-level scheduling" in caplog.text


def test_the_memory_budget_is_checked_in_local_mode_too(spark_local):
    config = Settings({**STORE, "job.container.memory.mb": f"{200 * MIB // MIB}"})
    with pytest.raises(ConfigError, match="cannot hold"):
        container_resources(spark_local.sparkContext, config)


class RunsOutOfMemory(StreamTask):
    def process(self, envelope, collector, coordinator):
        raise MemoryError()


def test_a_container_that_runs_out_of_memory_fails_the_job_saying_so(tmp_path, spark_local):
    config = prepare(job_config(tmp_path, task="tests.spark.run.test_resources:RunsOutOfMemory"))
    create_stream(config, "in", 1)
    create_stream(config, "out", 1)
    fill(config, "in", 1, 3)
    seal(config, "in")
    result = SparkJobRunner(config, spark=spark_local).run()
    assert result.outcome == "failed"
    error = result.error or ""
    assert error.startswith("out of memory: the Python worker ran out of memory (MemoryError)"), error
    assert "offset 0 of stream 'log.in' partition 0" in error  # the container's own error follows
