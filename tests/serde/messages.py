"""Protobuf message classes for the serde tests, built from a descriptor so no protoc step is needed.

Importable by Spark's Python workers as ``tests.serde.messages:PageView``, like a generated ``_pb2`` module.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_FILE = descriptor_pb2.FileDescriptorProto(
    name="millstream_tests/pageview.proto", package="millstream.tests", syntax="proto3"
)
_VIEW = _FILE.message_type.add(name="PageView")
_VIEW.field.add(name="user", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
_VIEW.field.add(name="page", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)
_VIEW.field.add(name="ts", number=3, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)
_CLICK = _FILE.message_type.add(name="Click")
_CLICK.field.add(name="target", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING)

_POOL = descriptor_pool.Default()
try:
    _DESCRIPTOR = _POOL.FindFileByName(_FILE.name)
except KeyError:
    _DESCRIPTOR = _POOL.Add(_FILE)

PageView = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("millstream.tests.PageView"))
Click = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("millstream.tests.Click"))
