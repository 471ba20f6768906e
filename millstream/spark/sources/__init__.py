"""Streams, checkpoints and stores as Spark DataFrames (Python Data Source API): formats ``millstream``,
``millstream-checkpoints`` and ``millstream-store``, batch and Structured Streaming.

Independent of the runner: a source plans and reads through the systems' admins and consumers only, and
treats every system alike (a system whose partitions split and merge is asked through
:class:`millstream.contracts.systems.ShardedSystemAdmin`)."""
