"""Local state of tasks: key-value stores, their on-disk layout, and the state backends that back
them up at every commit and restore them at start (``storage/backends/``).

A task reaches its stores with ``context.get_store(name)``; ``KeyValueStore`` is what it gets.
"""

from millstream.storage.kv import KeyValueSnapshot, KeyValueStore

__all__ = ["KeyValueSnapshot", "KeyValueStore"]
