"""Public path of Spark Connect sessions (``millstream.spark.connect.remote_session(url)``).

They live in :mod:`millstream.spark.run.connect`; this module re-exports them, so the documented import
keeps working whatever the package layout."""

from millstream.spark.run.connect import is_connect, remote_session

__all__ = ["is_connect", "remote_session"]
