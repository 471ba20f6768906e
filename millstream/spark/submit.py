"""Run a job under ``spark-submit``: ``spark-submit [options] millstream/spark/submit.py job.yaml [--stage N]``.

The file users hand to ``spark-submit`` (find it with
``python -c 'import millstream.spark.submit as m; print(m.__file__)'``): it stays at this path and runnable
as a script, and runs :func:`millstream.spark.run.submit.main`, where the entry point lives."""

import sys

from millstream.spark.run.submit import check_submitted_conf, main, submit

__all__ = ["check_submitted_conf", "main", "submit"]

if __name__ == "__main__":
    sys.exit(main())
