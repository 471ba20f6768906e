"""Old path of :class:`millstream.spark.run.runner.SparkJobRunner`, kept for one release for code that
imports it from here (users should run jobs through ``millstream.Job``)."""

import warnings

from millstream.spark.run.runner import SparkJobRunner

warnings.warn(
    "millstream.spark.runner moved to millstream.spark.run.runner"
    " (an internal module; run jobs through millstream.Job)",
    DeprecationWarning,
    stacklevel=2,
)


__all__ = ["SparkJobRunner"]
