"""The stateful map of the high-level API: a user function with a ``ValueState`` per key.

Values live in the operator's ``KeyValueState`` under the user's key, so they persist exactly as window
accumulators do (with the task's state at every commit, restored before the first message).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from millstream.api.application import KV
from millstream.api.specs import StatefulMapSpec
from millstream.api.state import ValueState
from millstream.operators.graph import GraphContext, operator_failed
from millstream.operators.state import KeyValueState
from millstream.operators.stateful import StatefulOperatorImpl, init_parts


class _KeyedValue(ValueState):
    """A handle on one key of a ``KeyValueState``; values are boxed in a 1-tuple so ``None`` is a value."""

    __slots__ = ("_key", "_state")

    def __init__(self, state: KeyValueState, key: Hashable) -> None:
        self._state = state
        self._key = key

    @property
    def key(self) -> Hashable:
        return self._key

    def get(self, default: Any = None) -> Any:
        boxed = self._state.get(self._key)
        return default if boxed is None else boxed[0]

    def set(self, value: Any) -> None:
        self._state.put(self._key, (value,))

    def clear(self) -> None:
        self._state.delete(self._key)


class StatefulMapImpl(StatefulOperatorImpl):
    def __init__(self, spec: StatefulMapSpec, context: GraphContext, state: KeyValueState) -> None:
        super().__init__(spec, context, state)
        self.fn = spec.fn
        self.key_fn = spec.key_fn
        self.flat = spec.flat

    def init(self, task_context: Any) -> None:
        super().init(task_context)
        init_parts(task_context, self.key_fn)

    def process(self, message: Any, timestamp: int) -> None:
        try:
            key = self._key(message)
            result = self.fn(message, _KeyedValue(self.state, key))
            results = list(result or ()) if self.flat else [result]
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        for output in results:
            self.emit(output, timestamp)

    def _key(self, message: Any) -> Hashable:
        if self.key_fn is not None:
            key: Hashable = self.key_fn(message)
            return key
        if isinstance(message, KV):
            return message.key
        raise TypeError(f"message {message!r} is not a KV: give {self.spec.kind} a key= function")

    def rebuild(self) -> None:
        """Nothing to rebuild: a key's value is read from the state when its message comes."""
