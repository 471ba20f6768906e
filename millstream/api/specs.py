"""The operator graph an application describes: one immutable spec per operator, linked to its inputs.

Specs are plain data. ``describe`` builds them on the driver (to plan stages and streams) and again in
every container (to run them), so a spec holds the user's functions but no runtime state. Ids are
stable across both: ``<kind>-<n>`` in the order operators were added, or the ``name`` the user gave;
stateful operators (windows, ``partition_by``) are named so their state survives a change of the graph
elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from millstream.api.application import InputDescriptor, OutputDescriptor
    from millstream.api.table import TableDescriptor
    from millstream.api.windows import Aggregator, WindowDefinition


@dataclass(eq=False, kw_only=True)
class OperatorSpec:
    op_id: str
    inputs: tuple[OperatorSpec, ...] = ()

    kind = "operator"
    stateful = False
    """Whether the operator keeps state per task (the planner gives such a job its operator store)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.op_id})"

    @property
    def function(self) -> Any:
        """The user object whose optional hooks (``init``, ``close``, ``on_watermark``,
        ``on_end_of_stream``) the runtime calls; None for operators without one."""
        return None


@dataclass(eq=False, kw_only=True)
class InputSpec(OperatorSpec):
    descriptor: InputDescriptor
    kind = "input"


@dataclass(eq=False, kw_only=True)
class MapSpec(OperatorSpec):
    fn: Callable[[Any], Any]
    kind = "map"

    @property
    def function(self) -> Any:
        return self.fn


@dataclass(eq=False, kw_only=True)
class FilterSpec(OperatorSpec):
    fn: Callable[[Any], bool]
    kind = "filter"

    @property
    def function(self) -> Any:
        return self.fn


@dataclass(eq=False, kw_only=True)
class AsyncMapSpec(OperatorSpec):
    """``map_async`` / ``flat_map_async``: an ``async def`` function awaited per message (see ``MessageStream``)."""

    fn: Callable[[Any], Any]
    flat: bool = False
    concurrency: int = 1
    ordered: bool = True
    timeout_ms: int | None = None
    kind = "map_async"

    @property
    def function(self) -> Any:
        return self.fn


@dataclass(eq=False, kw_only=True)
class FlatMapSpec(OperatorSpec):
    fn: Callable[[Any], Iterable[Any]]
    kind = "flat_map"

    @property
    def function(self) -> Any:
        return self.fn


@dataclass(eq=False, kw_only=True)
class MergeSpec(OperatorSpec):
    kind = "merge"


@dataclass(eq=False, kw_only=True)
class PartitionBySpec(OperatorSpec):
    """Repartitions by ``key_fn`` through an intermediate stream; downstream gets ``KV(key, value)``."""

    name: str
    key_fn: Callable[[Any], Any]
    value_fn: Callable[[Any], Any] | None = None
    key_serde: str = "json"
    msg_serde: str = "json"
    kind = "partition_by"


@dataclass(eq=False, kw_only=True)
class WindowSpec(OperatorSpec):
    window: WindowDefinition
    key_fn: Callable[[Any], Any] | None
    aggregator: Aggregator
    allowed_lateness_ms: int = 0
    kind = "window"
    stateful = True


@dataclass(eq=False, kw_only=True)
class StatefulMapSpec(OperatorSpec):
    """``fn(message, state)`` with the ``ValueState`` of ``key_fn(message)`` (a ``KV``'s key when None);
    ``flat`` emits each item of the result, else the result itself."""

    fn: Callable[[Any, Any], Any]
    key_fn: Callable[[Any], Any] | None = None
    flat: bool = False
    kind = "map_with_state"
    stateful = True

    @property
    def function(self) -> Any:
        return self.fn


@dataclass(eq=False, kw_only=True)
class StreamJoinSpec(OperatorSpec):
    """Joins ``inputs[0]`` (left) with ``inputs[1]`` (right) on equal keys when their event times are at
    most ``within_ms`` apart; both sides are buffered per key until the watermark passes that interval."""

    key_fn: Callable[[Any], Any] | None
    other_key_fn: Callable[[Any], Any] | None
    joiner: Callable[[Any, Any], Any]
    within_ms: int
    allowed_lateness_ms: int = 0
    how: str = "inner"
    kind = "stream_join"
    stateful = True

    @property
    def function(self) -> Any:
        return self.joiner


@dataclass(eq=False, kw_only=True)
class JoinSpec(OperatorSpec):
    table: TableDescriptor
    key_fn: Callable[[Any], Any]
    joiner: Callable[[Any, Any], Any]
    how: str = "inner"
    kind = "join"

    @property
    def function(self) -> Any:
        return self.joiner


@dataclass(eq=False, kw_only=True)
class SendToSpec(OperatorSpec):
    output: OutputDescriptor
    key_fn: Callable[[Any], Any] | None = None
    kind = "send_to"


@dataclass(eq=False, kw_only=True)
class SinkSpec(OperatorSpec):
    fn: Callable[[Any, Any, Any], None]
    kind = "sink"

    @property
    def function(self) -> Any:
        return self.fn


@dataclass
class OperatorGraphSpec:
    """Every operator of an application, in the order it was described."""

    operators: list[OperatorSpec] = field(default_factory=list)

    def consumers(self, spec: OperatorSpec) -> list[OperatorSpec]:
        return [op for op in self.operators if any(upstream is spec for upstream in op.inputs)]

    @property
    def inputs(self) -> list[InputSpec]:
        return [op for op in self.operators if isinstance(op, InputSpec)]

    @property
    def partition_bys(self) -> list[PartitionBySpec]:
        return [op for op in self.operators if isinstance(op, PartitionBySpec)]

    def by_id(self, op_id: str) -> OperatorSpec:
        for op in self.operators:
            if op.op_id == op_id:
                return op
        raise KeyError(op_id)
