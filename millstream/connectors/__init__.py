"""Real systems and blob stores, each an extra and each owning everything it needs from its system:
``kafka`` (``millstream[kafka]``, with its checkpoint manager and metadata store), ``kinesis``
(``millstream[kinesis]``), ``s3`` (``millstream[s3]``) and ``azure`` (``millstream[azure]``) blob stores.
The engine reaches them only by a factory name in config, never by an import.
"""
