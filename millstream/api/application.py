"""The high-level API's entry point: an application describes a graph of operators over streams.

    class PageViewsPerMinute(StreamApplication):
        def describe(self, app: StreamApplicationDescriptor) -> None:
            views = app.input(InputDescriptor("log.page-views", msg_serde="json", timestamp=lambda v: v["ts"]))
            (views.partition_by(lambda v: v["page"], name="by-page")
                  .window(TumblingWindow(60_000), key=lambda kv: kv.key, aggregate=Count(), name="per-minute")
                  .send_to(OutputDescriptor("log.views-per-minute", msg_serde="json")))

Configured with ``app.class: module:PageViewsPerMinute``. The job coordinator cuts the graph into stages
at each ``partition_by`` (``millstream plan`` prints them); every task runs the operators of its stage
over its partitions, and watermarks and end-of-stream flow between stages in-band.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from millstream.api.errors import ApplicationError
from millstream.api.specs import InputSpec, OperatorGraphSpec, OperatorSpec
from millstream.config import Config
from millstream.config.views import parse_stream
from millstream.model import SystemStream

if TYPE_CHECKING:
    from millstream.api.stream import MessageStream

Spec = TypeVar("Spec", bound=OperatorSpec)

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class KV(NamedTuple):
    """A keyed message: what ``partition_by`` emits, and what a ``kv=True`` input gives."""

    key: Any
    value: Any


@dataclass(frozen=True)
class InputDescriptor:
    """A stream an application reads, with its serdes (names of registered serdes) and event time.

    ``timestamp`` extracts the event time (epoch ms) from a message; by default the record's own
    timestamp is used. ``max_out_of_orderness_ms`` (default ``app.watermark.max.out.of.orderness.ms``)
    is how far behind the newest event time a message may be and still be on time. With ``kv=True`` the
    stream gives ``KV(key, message)`` instead of the message.
    """

    stream: str
    key_serde: str | None = None
    msg_serde: str | None = None
    kv: bool = False
    timestamp: Callable[[Any], int] | None = None
    max_out_of_orderness_ms: int | None = None

    @property
    def system_stream(self) -> SystemStream:
        return parse_stream(self.stream, "app input")


@dataclass(frozen=True)
class OutputDescriptor:
    """A stream an application writes, with its serdes."""

    stream: str
    key_serde: str | None = None
    msg_serde: str | None = None

    @property
    def system_stream(self) -> SystemStream:
        return parse_stream(self.stream, "app output")


class StreamApplicationDescriptor:
    """What ``describe`` builds the graph with; ``config`` is the job's config, for the app's own settings."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config if config is not None else Config()
        self.graph = OperatorGraphSpec()
        self._counts: dict[str, int] = {}
        self._ids: set[str] = set()
        self._inputs: dict[SystemStream, InputSpec] = {}

    def input(self, descriptor: InputDescriptor | str) -> MessageStream:
        """The stream of messages of an input; each stream can be an input once."""
        from millstream.api.stream import MessageStream

        if isinstance(descriptor, str):
            descriptor = InputDescriptor(descriptor)
        stream = descriptor.system_stream
        if stream in self._inputs:
            raise ApplicationError(f"stream '{stream}' is already an input of this application")
        if descriptor.max_out_of_orderness_ms is not None and descriptor.max_out_of_orderness_ms < 0:
            raise ApplicationError(f"input '{stream}': max_out_of_orderness_ms must be >= 0")
        spec = self.add(InputSpec, "input", f"input-{stream}", descriptor=descriptor)
        self._inputs[stream] = spec
        return MessageStream(self, spec)

    def add(self, spec_class: type[Spec], kind: str, op_name: str | None = None, **fields: Any) -> Spec:
        """Register an operator; its id is ``op_name`` or ``<kind>-<n>``. Used by ``MessageStream``."""
        if op_name is None:
            number = self._counts.get(kind, 0)
            self._counts[kind] = number + 1
            op_id = f"{kind}-{number}"
        else:
            if not _NAME.match(op_name):
                raise ApplicationError(
                    f"operator name '{op_name}' must start with a letter or digit and hold only letters, digits, "
                    "'.', '_' and '-'"
                )
            op_id = op_name
        if op_id in self._ids:
            raise ApplicationError(f"two operators of the application are named '{op_id}'; names must be unique")
        self._ids.add(op_id)
        spec = spec_class(op_id=op_id, **fields)
        self.graph.operators.append(spec)
        return spec


class StreamApplication(ABC):
    """A high-level application; ``app.class`` names it. Instantiated without arguments."""

    @abstractmethod
    def describe(self, app: StreamApplicationDescriptor) -> None:
        """Build the graph: ``app.input(...)`` and the operators of ``MessageStream``."""


def describe_application(application: StreamApplication, config: Config | None = None) -> StreamApplicationDescriptor:
    """Run ``describe`` and check the graph is one the runtime can plan."""
    descriptor = StreamApplicationDescriptor(config)
    application.describe(descriptor)
    if not descriptor.graph.inputs:
        raise ApplicationError(f"application {type(application).__name__} describes no input (use app.input)")
    return descriptor
