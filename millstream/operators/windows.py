"""The window operator: accumulators per (window, key), fired by the input watermark.

State entries are ``(start, end, key) -> [accumulator, fired]`` in a ``KeyValueState``; an index of
window ends (which ends still have to fire, which fired windows to purge when their allowed lateness
has passed) lives in memory and is rebuilt from the entries at restore, so the state itself is all
that has to be persisted. A window fires when the input watermark reaches its end, in order of ends,
keys in the order they first appeared.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Hashable
from typing import Any

from millstream.api.specs import WindowSpec
from millstream.api.windows import WindowPane
from millstream.control.errors import ControlStateError
from millstream.operators.graph import GraphContext, operator_failed
from millstream.operators.state import KeyValueState
from millstream.operators.stateful import StatefulOperatorImpl, init_parts

log = logging.getLogger(__name__)

WindowKey = tuple[int, int, Hashable]


class WindowImpl(StatefulOperatorImpl):
    def __init__(self, spec: WindowSpec, context: GraphContext, state: KeyValueState) -> None:
        super().__init__(spec, context, state)
        self.window = spec.window
        self.key_fn = spec.key_fn
        self.aggregator = spec.aggregator
        self.lateness = spec.allowed_lateness_ms
        self._ends: dict[int, dict[WindowKey, None]] = {}
        """Window end -> the state keys of that end, in first-seen order."""
        self._to_fire: list[int] = []
        self._fired: set[int] = set()
        self._to_purge: list[tuple[int, int]] = []
        """(end + allowed lateness, end) of fired windows kept for late messages."""
        self.late_dropped = 0
        self.panes = 0

    def init(self, task_context: Any) -> None:
        init_parts(task_context, self.key_fn, self.aggregator)

    def close(self) -> None:
        pass

    def process(self, message: Any, timestamp: int) -> None:
        try:
            key = self.key_fn(message) if self.key_fn is not None else None
            windows = self.window.assign(timestamp)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        watermark = self.input_watermark
        for start, end in windows:
            if end + self.lateness <= watermark:
                self.late_dropped += 1
                if self.late_dropped == 1 or self.late_dropped % 1000 == 0:
                    log.warning(
                        "window '%s': dropped a message at %d, later than its window [%d, %d) allows "
                        "(watermark %d, allowed lateness %d ms; %d dropped so far)",
                        self.op_id, timestamp, start, end, watermark, self.lateness, self.late_dropped,
                    )  # fmt: skip
                continue
            state_key: WindowKey = (start, end, key)
            entry = self.state.get(state_key)
            try:
                accumulator = self.aggregator.initial() if entry is None else entry[0]
                accumulator = self.aggregator.add(accumulator, message)
            except Exception as error:
                raise operator_failed(self.op_id, error) from error
            fired = entry is not None and entry[1]
            if entry is None:
                self._index(state_key)
            if end <= watermark:  # due already: a late message within the allowed lateness
                self._emit_pane(state_key, accumulator, update=fired)
                fired = True
            self.state.put(state_key, [accumulator, fired])

    def handle_watermark(self, watermark: int) -> None:
        while self._to_fire and self._to_fire[0] <= watermark:
            end = heapq.heappop(self._to_fire)
            if end in self._fired:
                continue
            for state_key in list(self._ends.get(end, ())):
                entry = self.state.get(state_key)
                if entry is None:
                    continue
                self._emit_pane(state_key, entry[0], update=bool(entry[1]))
                self.state.put(state_key, [entry[0], True])
            self._fired.add(end)
            if self.lateness > 0:
                heapq.heappush(self._to_purge, (end + self.lateness, end))
            else:
                self._purge(end)
        while self._to_purge and self._to_purge[0][0] <= watermark:
            _, end = heapq.heappop(self._to_purge)
            self._purge(end)
        super().handle_watermark(watermark)

    def _emit_pane(self, state_key: WindowKey, accumulator: Any, update: bool) -> None:
        start, end, key = state_key
        try:
            value = self.aggregator.result(accumulator)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        self.panes += 1
        self.emit(WindowPane(key, start, end, value, update), end - 1)

    def _index(self, state_key: WindowKey) -> None:
        end = state_key[1]
        keys = self._ends.get(end)
        if keys is None:
            keys = self._ends[end] = {}
            if end <= self.input_watermark:
                self._fired.add(end)
                if self.lateness > 0:
                    heapq.heappush(self._to_purge, (end + self.lateness, end))
            else:
                heapq.heappush(self._to_fire, end)
        keys[state_key] = None

    def _purge(self, end: int) -> None:
        for state_key in self._ends.pop(end, {}):
            self.state.delete(state_key)
        self._fired.discard(end)

    def rebuild(self) -> None:
        """The index of window ends, from the entries (in the state's order)."""
        self._ends.clear()
        self._to_fire.clear()
        self._to_purge.clear()
        self._fired.clear()
        for state_key, entry in self.state.items():
            if not (isinstance(state_key, tuple) and len(state_key) == 3):
                raise ControlStateError(f"window '{self.op_id}': unexpected state key {state_key!r}")
            end = state_key[1]
            if end not in self._ends:
                self._ends[end] = {}
                if entry[1]:
                    self._fired.add(end)
                    if self.lateness > 0:
                        heapq.heappush(self._to_purge, (end + self.lateness, end))
                else:
                    heapq.heappush(self._to_fire, end)
            self._ends[end][state_key] = None
