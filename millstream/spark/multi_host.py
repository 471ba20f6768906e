"""Old path of :mod:`millstream.spark.run.multi_host`, kept for one release for code that imports from here."""

from millstream.spark.run.multi_host import refuse_host_local_blobs, refuse_host_local_state

__all__ = ["refuse_host_local_blobs", "refuse_host_local_state"]
