"""Everything millstream does with Spark, in three parts with one job each (their import rules are
import-linter contracts in ``pyproject.toml``):

* :mod:`millstream.spark.sources`: streams, checkpoints and stores as DataFrames (formats ``millstream``,
  ``millstream-checkpoints``, ``millstream-store``); imports neither of the others.
* :mod:`millstream.spark.run`: the Spark runner; imports the sources only to register their formats on the
  sessions it builds.
* :mod:`millstream.spark.builds`: bulk builds of adjunct-store versions; uses the runner's session checks.

The modules directly in this package are the paths users name (``datasource``, ``store_datasource``,
``connect``, the ``spark-submit`` script ``submit.py``) and old paths kept for one release; each only
re-exports from the parts.
"""
