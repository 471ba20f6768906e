"""Remote tables: what ``RemoteTable`` (``millstream.api.remote_table``) defines, at run time.

Samza's Table API in Python: a table read (and optionally written) through ``async`` functions that call
another service, with a rate limiter shared by the container's tasks (``limiter``), retries with a budget
(``retry``), a cache in front (``cache``) and batching of reads (``remote``). The limiter, the cache and the
retry schedule are sans-IO: they take the time as an argument and never wait, so their rules are tested
alone; ``remote.RemoteTableInstance`` awaits on the container's event loop, and ``provider.TableProvider``
builds one instance per table per container.
"""
