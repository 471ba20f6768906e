"""millstream: Samza-style stream processing in Python, run on Apache Spark.

What a user imports to write and run a job. ``Job`` is the entry point: ``Job.from_file("job.yaml").run()``.
The public surface is this package and the modules of ``PUBLIC_MODULES``; everything else is internal,
reached by its package path, and may change between releases (``tests/test_public_api.py`` holds the
examples and the documentation to this list).
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from millstream.api.application import (
    KV,
    InputDescriptor,
    OutputDescriptor,
    StreamApplication,
    StreamApplicationDescriptor,
)
from millstream.api.remote_table import AsyncTable, RemoteTable
from millstream.api.stream import MessageStream
from millstream.api.task import (
    AsyncStreamTask,
    BatchStreamTask,
    ClosableTask,
    DrainListenerTask,
    EndOfStreamListenerTask,
    InitableTask,
    MessageCollector,
    StreamTask,
    TaskContext,
    TaskCoordinator,
    WindowableTask,
)
from millstream.api.windows import SessionWindow, SlidingWindow, TumblingWindow, WindowPane
from millstream.errors import ConfigError, MillstreamError
from millstream.model import (
    IncomingMessageEnvelope,
    OutgoingMessageEnvelope,
    Partition,
    SystemStream,
    SystemStreamPartition,
    TaskName,
)
from millstream.table.errors import RemoteTableError, RetriableError

# The job façade, what a run returns, and the rest of the public surface (issue 34) -------------------------
# isort: split
from millstream.adjunct.extractor import KeyValueExtractor, KeyValueExtractorFactory
from millstream.api.windows import Count, Sum
from millstream.config import Config
from millstream.old_paths import install as _install_old_paths

_install_old_paths()  # the old paths of modules moved when each top-level folder became one layer

if TYPE_CHECKING:
    from millstream.coordinator.job_result import JobResult
    from millstream.job import Job

PUBLIC_MODULES: tuple[str, ...] = (
    "millstream",
    "millstream.api.application",
    "millstream.api.functions",
    "millstream.api.remote_table",
    "millstream.api.state",
    "millstream.api.stream",
    "millstream.api.table",
    "millstream.api.task",
    "millstream.api.windows",
    "millstream.connectors.kinesis",
    "millstream.contracts.metrics",
    "millstream.errors",
    "millstream.log_context",
    "millstream.model",
    "millstream.serde",
    "millstream.serde.avro",
    "millstream.serde.protobuf",
    "millstream.serde.schema_registry",
    "millstream.spark.datasource",
    "millstream.startpoint",
    "millstream.storage.kv",
    "millstream.table.errors",
    "millstream.testing",
)
"""The modules a user may import from (docs/reference/api.md says what each is for); the rest is internal."""

_LAZY = {"Job": "millstream.job", "JobResult": "millstream.coordinator.job_result"}
"""Imported on first use: they bring the coordinator and the runners, which writing a task does not need."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'millstream' has no attribute '{name}'")


# -----------------------------------------------------------------------------------------------------------------

try:  # pyproject.toml is the one place the version is written; the installed metadata carries it here
    __version__ = version("millstream")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "KV",
    "AsyncStreamTask",
    "AsyncTable",
    "BatchStreamTask",
    "ClosableTask",
    "Config",
    "ConfigError",
    "Count",
    "DrainListenerTask",
    "EndOfStreamListenerTask",
    "IncomingMessageEnvelope",
    "InitableTask",
    "InputDescriptor",
    "Job",
    "JobResult",
    "KeyValueExtractor",
    "KeyValueExtractorFactory",
    "MessageCollector",
    "MessageStream",
    "MillstreamError",
    "OutgoingMessageEnvelope",
    "OutputDescriptor",
    "Partition",
    "RemoteTable",
    "RemoteTableError",
    "RetriableError",
    "SessionWindow",
    "SlidingWindow",
    "StreamApplication",
    "StreamApplicationDescriptor",
    "StreamTask",
    "Sum",
    "SystemStream",
    "SystemStreamPartition",
    "TaskContext",
    "TaskCoordinator",
    "TaskName",
    "TumblingWindow",
    "WindowPane",
    "WindowableTask",
]
