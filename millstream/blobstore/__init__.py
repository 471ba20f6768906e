"""Blob stores the blob-store state backend writes snapshots to: a local directory (default), the S3
API (``millstream[s3]``) and the Azure Blob API (``millstream[azure]``); ``base.py`` is the contract."""
