"""What every stateful operator shares: its ``KeyValueState`` goes with the operator's snapshot when the state
does not persist itself (the in-memory state), and the in-memory indexes the operator keeps beside it (timers,
purge times) are rebuilt from the state's entries at restore, so the entries are all that is ever persisted."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from millstream.api.specs import OperatorSpec
from millstream.operators.graph import GraphContext, OperatorImpl
from millstream.operators.state import KeyValueState


class StatefulOperatorImpl(OperatorImpl):
    def __init__(self, spec: OperatorSpec, context: GraphContext, state: KeyValueState) -> None:
        super().__init__(spec, context)
        self.state = state

    def snapshot(self) -> dict[str, Any]:
        document = super().snapshot()
        data = self.state.snapshot()
        if data is not None:
            document["state"] = data
        return document

    def restore(self, document: Mapping[str, Any]) -> None:
        super().restore(document)
        if "state" in document:
            self.state.restore(document["state"])
        self.rebuild()

    @abstractmethod
    def rebuild(self) -> None:
        """Rebuild the operator's in-memory indexes from ``self.state``, which was just restored."""


def init_parts(task_context: Any, *parts: Any) -> None:
    """Call ``init(task_context)`` on each user object of an operator that has one (a key function, an
    aggregator), as the runtime does for the operator's main function."""
    for part in parts:
        init = getattr(part, "init", None)
        if callable(init):
            init(task_context)
