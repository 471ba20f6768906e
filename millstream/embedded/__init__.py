"""The defaults a job runs on with no server: the ``log`` system (a durable partitioned log on local disk),
the SQLite metadata store (``sqlite``, with its write-lock lease ``sqlite_lock``) and the local directory blob
store (``local_blobstore``). The engine reaches them only by a factory name in config, as it does connectors.
"""
