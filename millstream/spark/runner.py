"""Old path of :class:`millstream.spark.run.runner.SparkJobRunner`, kept for one release for code that
imports it from here (users should run jobs through ``millstream.Job``)."""

from millstream.spark.run.runner import SparkJobRunner

__all__ = ["SparkJobRunner"]
