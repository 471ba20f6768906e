"""The Spark runner: a job's containers as long-running Spark tasks, driven by the driver loop.

Builds sessions (with the DataFrame formats of :mod:`millstream.spark.sources` registered), sizes and
places the containers, watches their liveness and progress, and turns Spark's failures into the driver
loop's outcomes. ``millstream/spark/submit.py`` is its ``spark-submit`` entry point."""
