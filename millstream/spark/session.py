"""Old path of :mod:`millstream.spark.run.session`, kept for one release for code that imports from here."""

from millstream.spark.run.session import JavaNotFoundError, build_session, find_java, local_slots

__all__ = ["JavaNotFoundError", "build_session", "find_java", "local_slots"]
