"""What only the composition roots use to build a job's collaborators: a system's factory by name
(``systems``) and the job's metadata store (``metadata``).

An import-linter contract lets only the composition roots import this package: a container's services
(:mod:`millstream.runtime.services`), the driver's (:mod:`millstream.coordinator.services`) and the entry points
(``job/``, ``cli/``, ``testing.py``, ``spark/``). Everything else is handed what they build.
"""
