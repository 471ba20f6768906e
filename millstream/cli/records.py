"""How ``millstream streams consume`` prints a record: one JSON object per line, never stopping at one
it cannot decode (a dead-lettered record, a newer producer's output) — that one is shown raw with the
reason, so the reader can see what is in the stream."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from millstream.model import IncomingMessageEnvelope
from millstream.serde.base import Serde


@dataclass
class RecordPrinter:
    key_serde: Serde | None
    msg_serde: Serde | None
    headers: bool = False
    printed: int = field(default=0, init=False)

    @classmethod
    def of(cls, serdes: tuple[Serde | None, Serde | None], *, headers: bool, raw: bool) -> RecordPrinter:
        """A printer decoding with a stream's ``(key, message)`` serdes, or none when ``raw``."""
        if raw:
            return cls(None, None, headers)
        return cls(serdes[0], serdes[1], headers)

    def line(self, envelope: IncomingMessageEnvelope) -> str:
        record: dict[str, Any] = {
            "partition": envelope.ssp.partition,
            "offset": envelope.offset,
            "timestamp": envelope.timestamp,
        }
        errors = []
        for name, data, serde in (("key", envelope.key, self.key_serde), ("value", envelope.message, self.msg_serde)):
            try:
                record[name] = printable(serde.from_bytes(data) if serde is not None and data is not None else data)
            except Exception as error:  # any serde failure: show the bytes, say why, go on
                record[name] = printable(data)
                errors.append(f"cannot decode the {name} at offset {envelope.offset}: {type(error).__name__}: {error}")
        if self.headers:
            record["headers"] = {name: printable(value) for name, value in (envelope.headers or {}).items()}
        if errors:
            record["error"] = "; ".join(errors)
        self.printed += 1
        return orjson.dumps(record, default=repr).decode()


def printable(value: Any) -> Any:
    """Bytes as text where they are UTF-8, else as hex; anything else as is."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        try:
            return data.decode()
        except UnicodeDecodeError:
            return data.hex()
    return value
