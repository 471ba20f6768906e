"""Adjunct data stores (SEP-4): read-only key-value stores that maintain themselves from a stream.

A store named by ``stores.<s>.adstore.input`` is filled from that stream, never by the task: its
messages go through a key/value extractor into the store instead of to ``process``. Partitioned inputs
fill one store per task, broadcast inputs (``task.broadcast.inputs``) one store per container shared by
its tasks. A versioned store serves sealed versions of a bounded dataset, built from the stream or in
bulk with Spark (``millstream adstore build``). See ``docs/adjunct.md``.
"""
