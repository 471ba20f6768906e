"""Name what ended a container when Spark reports only that its job failed.

A container that dies takes its Spark task with it, and py4j hands the driver one long Java exception chain that
opens with "An error occurred while calling z:...collectAndServe". What the operator needs is inside it: which
container (Spark partition i is container i), on which executor and host, and why — a Python exception in the
container, a native crash of its Python worker (a segfault or abort, named by the worker's fault handler), memory
(a ``MemoryError`` under ``spark.executor.pyspark.memory``, an executor killed with exit code 137, a cluster manager
killing it for its memory) or a lost executor or worker. :func:`container_failure` reads the chain into a
:class:`ContainerFailure`: one line for the operator, the failing attempt's own text as detail (``-v``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

from millstream.spark.run.resources import explain_memory_failure

if TYPE_CHECKING:
    from pyspark import SparkContext

FailureKind = Literal["python", "crash", "memory", "lost", "spark"]

_MILLSTREAM_ERROR = re.compile(r"^millstream\.[\w.]+(Error|Exception): ")
_PYTHON_ERROR = re.compile(r"^(?:[\w.]+\.)?(?P<name>\w*(?:Error|Exception|Exit))\b:?\s*(?P<message>.*)$")
_LOST_TASK = re.compile(
    r"Lost task (?P<partition>\d+)\.(?P<attempt>\d+) in stage [\d.]+ \(TID \d+\) "
    r"\((?P<host>[^\s)]+) executor (?P<executor>[^)]+)\): (?P<reason>.*)"
)
_ATTEMPTS = re.compile(r"Task \d+ in stage [\d.]+ failed (?P<attempts>\d+) times?")
_CRASHED = "Python worker exited unexpectedly (crashed)"
_FATAL = re.compile(r"Fatal Python error: (?P<what>[^\n]+)")
_EXIT_CODE = re.compile(r"exit(?:ed with)? code:? ?(?P<code>-?\d+)", re.IGNORECASE)
_MEMORY_WORDS = (
    "exceeding memory limits",
    "exceeding physical memory",
    "OOMKilled",
    "container OOM",
    "java.lang.OutOfMemoryError",
    "Container killed",
)
_JAVA_FRAME = re.compile(r"^\s+at [\w$.<>]+\(.*\)$|^\s*\.\.\. \d+ more$")

MEMORY_KEYS = "spark.executor.memory, spark.executor.memoryOverhead and spark.executor.pyspark.memory"
_SIGNALS = {134: "SIGABRT", 137: "SIGKILL", 139: "SIGSEGV", 143: "SIGTERM"}


@dataclass(frozen=True)
class ContainerFailure:
    """Why a container's Spark task failed for good, read from Spark's exception text."""

    kind: FailureKind
    cause: str
    """The cause in words, without where it happened."""
    container: int | None = None
    executor: str | None = None
    host: str | None = None
    attempts: int | None = None
    detail: str = ""
    """The failing attempt's own report: the Python traceback, or Spark's reason without Java frames."""

    def where(self) -> str:
        """``executor 1 on host 10.0.0.7, 4 attempt(s)``: the last failed attempt's place."""
        parts = []
        if self.executor is not None:
            local = " (local mode)" if self.executor == "driver" else ""
            parts.append(f"executor {self.executor}{local}" + (f" on host {self.host}" if self.host else ""))
        if self.attempts:
            parts.append(f"{self.attempts} attempt(s)")
        return ", ".join(parts)

    def summary(self) -> str:
        """One line: which container, what happened, where."""
        if self.kind == "python" and self.container is None:
            return self.cause  # the container's own error, already naming task, stream, partition and offset
        who = f"container {self.container}" if self.container is not None else "a container"
        where = self.where()
        return f"{who} {self.cause}" + (f" [{where}]" if where else "")

    def message(self, *, verbose: bool = False, log_location: str | None = None) -> str:
        """The summary, where the executor's log is, and with ``verbose`` the failing attempt's report."""
        lines = [self.summary()]
        if log_location:
            lines.append(f"executor log: {log_location}")
        if verbose and self.detail and self.kind != "python":  # a Python traceback is the container's, printed once
            lines.append(self.detail)
        return "\n".join(lines)


class _Where(NamedTuple):
    container: int | None
    executor: str | None
    host: str | None
    attempts: int | None


def _failure(kind: FailureKind, cause: str, text: str, where: _Where) -> ContainerFailure:
    return ContainerFailure(kind, cause, where.container, where.executor, where.host, where.attempts, _report(text))


def container_failure(text: str, spark_conf: Mapping[str, str] | None = None) -> ContainerFailure:
    """Read the exception text of a failed container job (``str`` of the py4j / pyspark error).

    ``spark_conf`` (the session's settings) lets a native crash under ``spark.executor.pyspark.memory`` name that
    limit: the worker's allocations beyond it fail, and a native one that fails aborts the worker."""
    conf = spark_conf or {}
    lost = _LOST_TASK.search(text)
    attempts = _ATTEMPTS.search(text)
    where = _Where(
        int(lost.group("partition")) if lost else None,
        lost.group("executor").strip() if lost else None,
        lost.group("host") if lost else None,
        int(attempts.group("attempts")) if attempts else None,
    )
    if _CRASHED in text:
        return _crash(text, conf, where)
    if lost and "ExecutorLostFailure" in lost.group("reason"):
        return _executor_lost(text, lost.group("reason"), where)
    python = python_failure_cause(text)
    if python is not None:
        if python.startswith(("MemoryError", "builtins.MemoryError")):
            limit = conf.get("spark.executor.pyspark.memory")
            bound = f" (spark.executor.pyspark.memory={limit})" if limit else ""
            cause = (
                f"ran out of memory: its Python worker raised MemoryError{bound}; raise spark.executor.pyspark.memory "
                "or keep less in memory"
            )
            return _failure("memory", cause, text, where)
        return _failure("python", python if lost is None else f"failed: {python}", text, where)
    reason = lost.group("reason").strip() if lost else _first_spark_line(text)
    if any(word in text for word in _MEMORY_WORDS):
        return _failure("memory", f"ran out of memory: {reason}; raise {MEMORY_KEYS}", text, where)
    return _failure("spark", f"failed: {reason}", text, where)


def _crash(text: str, conf: Mapping[str, str], where: _Where) -> ContainerFailure:
    fatal = _FATAL.search(text)
    if fatal:
        how = f"crashed natively: its Python worker died of '{fatal.group('what').strip()}' (Fatal Python error)"
    else:
        how = (
            "crashed natively: its Python worker exited without a Python exception (os._exit, a native abort, or "
            "a signal such as the out-of-memory killer's SIGKILL)"
        )
        if (conf.get("spark.python.worker.faulthandler.enabled") or "false").lower() != "true":
            how += "; spark.python.worker.faulthandler.enabled=true names the signal and the Python frames"
    limit = conf.get("spark.executor.pyspark.memory")
    if limit:
        how += (
            f"; its memory is capped at spark.executor.pyspark.memory={limit}, and a native allocation beyond the "
            "cap aborts it: raise spark.executor.pyspark.memory"
        )
        return _failure("memory", how, text, where)
    return _failure("crash", how, text, where)


def _executor_lost(text: str, reason: str, where: _Where) -> ContainerFailure:
    """``ExecutorLostFailure (executor 1 exited caused by one of the running tasks) Reason: ...``."""
    said = reason.partition("Reason:")[2].strip() or reason.strip()
    code = _EXIT_CODE.search(said)
    exit_code = int(code.group("code")) if code else None
    signal = _SIGNALS.get(exit_code or 0)
    if exit_code == 137 or any(word in said for word in _MEMORY_WORDS):
        killed = f"exit code 137, {signal}" if exit_code == 137 else said
        cause = (
            f"lost its executor, killed ({killed}) most often for its memory by the OS's or the cluster manager's "
            f"out-of-memory killer: raise {MEMORY_KEYS}; Spark said: {said}"
        )
        return _failure("memory", cause, text, where)
    ended = f" (exit code {exit_code}, {signal})" if signal else ""
    return _failure("lost", f"lost its executor{ended}: {said}", text, where)


def python_failure_cause(text: str) -> str | None:
    """The user-meaningful cause of a Python exception in a container: the last millstream error of its
    traceback with the lines of its message (a task's error carries the user's traceback), else the last Python
    exception line; None when the text holds no Python exception."""
    lines = text.splitlines()
    ours = [i for i, line in enumerate(lines) if _MILLSTREAM_ERROR.match(line.strip())]
    if ours:
        kept = [lines[ours[-1]].strip()]
        for line in lines[ours[-1] + 1 :]:
            if line.lstrip().startswith(("at ", "Driver stacktrace", "py4j", "org.apache", "Caused by")):
                break
            kept.append(line.rstrip())
        return "\n".join(kept).rstrip()
    causes = []
    for line in lines:
        stripped = line.strip()
        match = _PYTHON_ERROR.match(stripped)
        if match and not stripped.startswith(("py4j", "org.apache", "java.", "Caused by", "Lost task")):
            causes.append(stripped)
    return causes[-1] if causes else None


def _first_spark_line(text: str) -> str:
    """Spark's own first line past py4j's 'An error occurred while calling ...'."""
    for line in text.splitlines():
        stripped = line.strip().lstrip(": ").strip()
        if stripped and not stripped.startswith("An error occurred while calling"):
            return stripped.removeprefix("org.apache.spark.SparkException: ")[:2000]
    return text.strip()[:2000] or "the Spark job failed"


def _report(text: str, limit: int = 60) -> str:
    """The failing attempt's report without Java frames and py4j's preamble, for ``-v``."""
    kept = []
    for line in text.splitlines():
        if line.strip().startswith("Driver stacktrace"):
            break
        if _JAVA_FRAME.match(line) or line.startswith("An error occurred while calling"):
            continue
        kept.append(line.rstrip().removeprefix(": "))  # py4j puts the Java exception after ": "
    while kept and not kept[-1]:
        kept.pop()
    return "\n".join(kept[:limit])


def executor_log_location(sc: SparkContext, failure: ContainerFailure) -> str | None:
    """Where the failed executor's log is: the driver's own output in local mode; else its stderr's URL, as the
    driver's status store remembers it (lost executors included), and on a standalone cluster the file in the
    worker's work directory; else the Spark UI's Executors tab or the event log."""
    executor = failure.executor
    if executor is None:
        return None
    if executor == "driver":
        return "the driver's stderr (in local mode the containers' Python workers write to it)"
    app = sc.applicationId
    where = [f"stderr of executor {executor}" + (f" on {failure.host}" if failure.host else "")]
    url = _stderr_url(sc, executor)
    if url:
        where.append(url)
    if str(sc.master).startswith("spark://"):
        where.append(f"on the worker's disk: <worker work dir>/{app}/{executor}/stderr")
    else:
        where.append(f"the Spark UI's Executors tab or the event log (spark.eventLog.dir) of {app}")
    return "; ".join(where)


def _stderr_url(sc: SparkContext, executor: str) -> str | None:
    try:
        summaries = sc._jsc.sc().statusStore().executorList(False).iterator()
        while summaries.hasNext():
            summary = summaries.next()
            if str(summary.id()) == executor:
                url = summary.executorLogs().get("stderr")
                return str(url.get()) if url.isDefined() else None
    except Exception:
        return None
    return None


def describe_failure(error: BaseException, sc: SparkContext, *, verbose: bool = False) -> str:
    """What the runner reports for a failed container job: the cause named, the executor's log, the detail with
    ``verbose``."""
    try:
        failure = container_failure(str(error), dict(sc.getConf().getAll()))
        location = executor_log_location(sc, failure)
    except Exception:  # Spark's JVM is gone (a second Ctrl-C ends it): the failure is named from its text alone
        failure, location = container_failure(str(error)), None
    message = failure.message(verbose=verbose, log_location=location)
    # a memory cause this reading did not name (RocksDB's std::bad_alloc, an ENOMEM...) still leads the message
    return message if failure.kind == "memory" else explain_memory_failure(message, error)
