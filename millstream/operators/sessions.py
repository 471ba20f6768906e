"""The session window operator: gap-based sessions per key that merge, fired by the input watermark.

State entries are ``key -> [[start, end, accumulator, fired_end], ...]``, the key's sessions in order of
start; ``fired_end`` is the end the session's last pane was emitted for (None before its first), so a
session that grew by a merge after firing emits again, as an update, when the watermark reaches its new
end. A message opens ``[ts, ts + gap)`` and merges with every session of its key that overlaps or touches
it; accumulators combine with ``MergingAggregator.merge``, earlier session first.

Timers live in memory: time -> the keys to look at then (a session's end, or its end plus the allowed
lateness once it fired, when it is purged). They are rebuilt from the entries at restore, so the state is
all that persists, and a watermark only visits the keys with a timer due, never every key. A timer left
behind by a merge finds nothing due and costs one lookup.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Hashable
from typing import Any

from millstream.api.specs import WindowSpec
from millstream.api.windows import MergingAggregator, SessionWindow, WindowPane
from millstream.control.errors import ControlStateError
from millstream.operators.graph import GraphContext, operator_failed
from millstream.operators.state import KeyValueState
from millstream.operators.stateful import StatefulOperatorImpl, init_parts

log = logging.getLogger(__name__)

Session = list[Any]
"""``[start, end, accumulator, fired_end]``."""


class SessionWindowImpl(StatefulOperatorImpl):
    def __init__(self, spec: WindowSpec, context: GraphContext, state: KeyValueState) -> None:
        super().__init__(spec, context, state)
        assert isinstance(spec.window, SessionWindow)
        self.gap = spec.window.gap_ms
        self.key_fn = spec.key_fn
        assert isinstance(spec.aggregator, MergingAggregator)  # MessageStream.window refuses the others
        self.aggregator = spec.aggregator
        self.lateness = spec.allowed_lateness_ms
        self._timers: dict[int, dict[Hashable, None]] = {}
        """Time -> the keys with a session to fire or purge then, in first-seen order."""
        self._times: list[int] = []
        self.late_dropped = 0
        self.panes = 0

    def init(self, task_context: Any) -> None:
        init_parts(task_context, self.key_fn, self.aggregator)

    def close(self) -> None:
        pass

    def process(self, message: Any, timestamp: int) -> None:
        try:
            key = self.key_fn(message) if self.key_fn is not None else None
            added = self.aggregator.add(self.aggregator.initial(), message)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        sessions: list[Session] = self.state.get(key) or []
        start, end = timestamp, timestamp + self.gap
        parts = [s for s in sessions if s[0] <= end and s[1] >= start]
        kept = [s for s in sessions if not (s[0] <= end and s[1] >= start)]
        merged_start = min([start, *(s[0] for s in parts)])
        merged_end = max([end, *(s[1] for s in parts)])
        watermark = self.input_watermark
        if merged_end + self.lateness <= watermark:
            self._drop(timestamp, merged_start, merged_end, watermark)
            return
        ordered = sorted([*parts, [start, end, added, None]], key=lambda s: (s[0], s[1]))
        try:
            accumulator = ordered[0][2]
            for part in ordered[1:]:
                accumulator = self.aggregator.merge(accumulator, part[2])
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        fired_ends = [s[3] for s in parts if s[3] is not None]
        session: Session = [merged_start, merged_end, accumulator, max(fired_ends) if fired_ends else None]
        if merged_end <= watermark:  # due already: a late message within the allowed lateness
            self._emit_pane(key, session)
            self._schedule(merged_end + self.lateness, key)
        else:
            self._schedule(merged_end, key)
        kept.append(session)
        kept.sort(key=lambda s: s[0])
        self.state.put(key, kept)

    def _drop(self, timestamp: int, start: int, end: int, watermark: int) -> None:
        self.late_dropped += 1
        if self.late_dropped == 1 or self.late_dropped % 1000 == 0:
            log.warning(
                "session window '%s': dropped a message at %d, later than its session [%d, %d) allows "
                "(watermark %d, allowed lateness %d ms; %d dropped so far)",
                self.op_id, timestamp, start, end, watermark, self.lateness, self.late_dropped,
            )  # fmt: skip

    def handle_watermark(self, watermark: int) -> None:
        while self._times and self._times[0] <= watermark:
            time = heapq.heappop(self._times)
            for key in self._timers.pop(time, {}):
                self._due(key, time)
        super().handle_watermark(watermark)

    def _due(self, key: Hashable, time: int) -> None:
        """Fire the key's sessions that end by ``time``; purge the fired ones whose lateness passed."""
        sessions: list[Session] | None = self.state.get(key)
        if not sessions:
            return
        kept = []
        for session in sessions:
            end = session[1]
            if end <= time and session[3] != end:
                self._emit_pane(key, session)
                if self.lateness > 0:
                    self._schedule(end + self.lateness, key)
                    kept.append(session)
            elif not (session[3] == end and end + self.lateness <= time):
                kept.append(session)
        if kept:
            self.state.put(key, kept)
        else:
            self.state.delete(key)

    def _emit_pane(self, key: Hashable, session: Session) -> None:
        start, end, accumulator, fired_end = session
        try:
            value = self.aggregator.result(accumulator)
        except Exception as error:
            raise operator_failed(self.op_id, error) from error
        session[3] = end
        self.panes += 1
        self.emit(WindowPane(key, start, end, value, fired_end is not None), end - 1)

    def _schedule(self, time: int, key: Hashable) -> None:
        keys = self._timers.get(time)
        if keys is None:
            keys = self._timers[time] = {}
            heapq.heappush(self._times, time)
        keys[key] = None

    def rebuild(self) -> None:
        """The timers, from the sessions."""
        self._timers.clear()
        self._times.clear()
        for key, sessions in self.state.items():
            if not isinstance(sessions, list):
                raise ControlStateError(f"session window '{self.op_id}': unexpected state of key {key!r}")
            for _, end, _, fired_end in sessions:
                self._schedule(end + self.lateness if fired_end == end else end, key)
