"""The serdes every job has without registering them: string, bytes, json, long, msgpack."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import orjson

from millstream.serde.base import SerdeError

_LONG = struct.Struct(">q")


class StringSerde:
    """UTF-8 text."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def to_bytes(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise SerdeError(f"string serde expects str, got {type(obj).__name__}")
        try:
            return obj.encode(self.encoding)
        except UnicodeEncodeError as error:
            raise SerdeError(f"string serde: cannot encode as {self.encoding}: {error}") from None

    def from_bytes(self, data: bytes) -> Any:
        try:
            return data.decode(self.encoding)
        except UnicodeDecodeError as error:
            raise SerdeError(f"string serde: not valid {self.encoding}: {error}") from None


class BytesSerde:
    """Pass-through; the default when a stream names no serde."""

    def to_bytes(self, obj: Any) -> bytes:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return bytes(obj)
        raise SerdeError(f"bytes serde expects bytes, got {type(obj).__name__} (configure a serde for the stream)")

    def from_bytes(self, data: bytes) -> Any:
        return data


class JsonSerde:
    """JSON via orjson; non-string dict keys are allowed on write, as JSON strings."""

    def to_bytes(self, obj: Any) -> bytes:
        try:
            return orjson.dumps(obj)
        except TypeError:
            pass  # non-string keys: the option costs about 30 % on every write, so only when needed
        try:
            return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS)
        except TypeError as error:
            raise SerdeError(f"json serde: {error}") from None

    def from_bytes(self, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as error:
            raise SerdeError(f"json serde: invalid JSON: {error}") from None


class LongSerde:
    """A signed 64-bit integer, 8 bytes big-endian, as Samza's LongSerde."""

    def to_bytes(self, obj: Any) -> bytes:
        if isinstance(obj, bool) or not isinstance(obj, int):
            raise SerdeError(f"long serde expects int, got {type(obj).__name__}")
        try:
            return _LONG.pack(obj)
        except struct.error:
            raise SerdeError(f"long serde: {obj} does not fit in 64 bits") from None

    def from_bytes(self, data: bytes) -> Any:
        if len(data) != 8:
            raise SerdeError(f"long serde expects 8 bytes, got {len(data)}")
        return _LONG.unpack(data)[0]


class MsgpackSerde:
    """MessagePack; bytes stay bytes and str stays str."""

    def to_bytes(self, obj: Any) -> bytes:
        try:
            return msgpack.packb(obj, use_bin_type=True)
        except (TypeError, ValueError, OverflowError) as error:
            raise SerdeError(f"msgpack serde: {error}") from None

    def from_bytes(self, data: bytes) -> Any:
        try:
            return msgpack.unpackb(data, raw=False, strict_map_key=False)
        except (msgpack.UnpackException, ValueError, TypeError) as error:
            raise SerdeError(f"msgpack serde: invalid data: {error}") from None
