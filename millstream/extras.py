"""Which of millstream's extras installs each optional dependency.

A feature whose library is missing should fail with one line naming the ``pip install`` that fixes it,
not with an ``ImportError`` deep in a plugin or a Java stack trace from a Spark worker. The names here
are the top-level modules the extras in ``pyproject.toml`` bring; a test keeps the two in step.
"""

from __future__ import annotations

import importlib.util

EXTRA_OF_MODULE: dict[str, tuple[str, ...]] = {
    "confluent_kafka": ("kafka",),
    "boto3": ("kinesis", "s3"),
    "botocore": ("kinesis", "s3"),
    "azure": ("azure",),
    "fastavro": ("avro",),
    "google": ("protobuf",),
    "pyarrow": ("dataframes",),
    "pandas": ("connect",),
    "grpc": ("connect",),
}
"""Top-level module -> the extras that install it (the first is the one to suggest)."""


def install_hint(error: ImportError) -> str | None:
    """``pip install 'millstream[x]'`` (with the alternatives) when ``error`` is a missing optional
    dependency of millstream; None for any other import error (a user's module, a broken install)."""
    missing = (error.name or "").partition(".")[0]
    extras = EXTRA_OF_MODULE.get(missing)
    if not extras or not isinstance(error, ModuleNotFoundError):
        return None
    commands = " or ".join(f"pip install 'millstream[{extra}]'" for extra in extras)
    return f"'{missing}' is not installed: {commands}"


def missing_module_hint(module: str, purpose: str) -> str | None:
    """One line saying that ``purpose`` needs ``module`` and which extra installs it, when ``module``
    cannot be imported here; None when it can."""
    if importlib.util.find_spec(module) is not None:
        return None
    extras = EXTRA_OF_MODULE.get(module.partition(".")[0], ())
    commands = " or ".join(f"pip install 'millstream[{extra}]'" for extra in extras) or f"pip install {module}"
    return f"{purpose} needs {module}, which is not installed: {commands}"
