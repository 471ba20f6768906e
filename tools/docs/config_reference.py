"""The configuration reference page, generated from the typed config views at every docs build.

The views (``millstream/config/views.py``, the ``settings.py`` beside each feature and each system's ``config.py``)
are what startup validation
accepts, so a reference built from them cannot drift: a key's type, default and description (the
field's docstring) have one source. ``mkdocs.yml`` runs this module as a hook; it replaces the
``<!-- config-reference -->`` marker of ``operating/configuration.md`` with one table per view, and fails the
build when a view is missing from ``SECTIONS`` or a key has no description.
"""

from __future__ import annotations

import importlib
import pkgutil
import types
import typing
from dataclasses import dataclass
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic.fields import FieldInfo

import millstream
from millstream.config.views import (
    AppConfig,
    ConfigView,
    JobConfig,
    StoreConfig,
    StoresConfig,
    StreamSamzaConfig,
    SystemSamzaConfig,
    TaskConfig,
)
from millstream.connectors.kafka.config import KafkaSystemConfig
from millstream.connectors.kinesis.config import KinesisSystemConfig
from millstream.contracts.blobstore_settings import BlobStoreConfig
from millstream.contracts.metadata_settings import MetadataConfig
from millstream.contracts.metrics_settings import MetricsConfig
from millstream.embedded.log.config import LogSystemConfig
from millstream.serde.settings import SerdeConfig
from millstream.startpoint.settings import StartpointConfig
from millstream.table.settings import TableConfig

MARKER = "<!-- config-reference -->"
PAGE = "operating/configuration.md"


@dataclass(frozen=True)
class Section:
    title: str
    prefix: str
    view: type[ConfigView]
    intro: str


SECTIONS = (
    Section("Job", "job.", JobConfig, "The job as a whole: its identity, containers and coordinator."),
    Section("Task", "task.", TaskConfig, "Every task of a low-level job (and the tasks a high-level one runs as)."),
    Section("Application", "app.", AppConfig, "A high-level `StreamApplication` and how it is planned into stages."),
    Section(
        "Systems",
        "systems.<s>.samza.",
        SystemSamzaConfig,
        "Every system, whatever its factory. `<s>` is the system's name; `log` exists without any key.",
    ),
    Section(
        "Streams",
        "systems.<s>.streams.<stream>.samza.",
        StreamSamzaConfig,
        "Per-stream overrides of the system-level settings.",
    ),
    Section(
        "Embedded log system",
        "systems.<s>.",
        LogSystemConfig,
        "A system whose `samza.factory` is `log` (the default system `log` is one).",
    ),
    Section(
        "Kafka system",
        "systems.<s>.",
        KafkaSystemConfig,
        "A system whose `samza.factory` is `kafka`. Besides these keys, everything under `systems.<s>.consumer.`, "
        "`.producer.` and `.admin.` goes to librdkafka as it is; `sensitive.systems.<s>.<key>` overrides `<key>` "
        "and is never printed.",
    ),
    Section(
        "Kinesis system",
        "systems.<s>.",
        KinesisSystemConfig,
        "A system whose `samza.factory` is `kinesis`. Secrets go under `sensitive.systems.<s>.aws.secretKey` "
        "(and `.aws.sessionToken`).",
    ),
    Section(
        "Serdes",
        "serializers.registry.<name>.",
        SerdeConfig,
        "A named serde that streams and stores refer to by `<name>` ([Serdes and formats](../guides/serdes.md)). "
        "Names have no dots.",
    ),
    Section("Stores, job-wide", "stores.", StoresConfig, "Defaults for every store of the job."),
    Section("Store", "stores.<s>.", StoreConfig, "One key-value store of every task; `<s>` is the store's name."),
    Section(
        "Remote table",
        "tables.<id>.",
        TableConfig,
        "A remote table read through async functions ([Async I/O](../guides/async.md#remote-tables)); `<id>` is "
        "the table's id.",
    ),
    Section("Blob store", "blob.store.", BlobStoreConfig, "Where the blob-store state backend keeps store snapshots."),
    Section(
        "Metrics",
        "metrics.",
        MetricsConfig,
        "What a running job measures and where it shows it ([Metrics](../guides/metrics.md)).",
    ),
    Section("Metadata store", "metadata.", MetadataConfig, "Where the job's metadata lives."),
    Section("Startpoints", "startpoint.", StartpointConfig, "Startpoints set with `millstream startpoint set`."),
)


def _constraints(info: FieldInfo) -> list[str]:
    shown = []
    for item in info.metadata:
        if isinstance(item, Ge):
            shown.append(f"≥ {item.ge}")
        elif isinstance(item, Gt):
            shown.append(f"> {item.gt}")
        elif isinstance(item, Le):
            shown.append(f"≤ {item.le}")
        elif isinstance(item, Lt):
            shown.append(f"< {item.lt}")
        elif isinstance(item, MinLen) and item.min_length > 1:
            shown.append(f"at least {item.min_length}")
        elif isinstance(item, MaxLen):
            shown.append(f"at most {item.max_length}")
    return shown


def _type_name(annotation: Any) -> str:
    """How a value is written in config, not how Python holds it."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in args if arg is not type(None))
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{arg}`" for arg in args)
    if origin is list:
        item = args[0] if args else str
        if typing.get_origin(item) is typing.Literal:
            return "list of " + ", ".join(f"`{arg}`" for arg in typing.get_args(item)) + " (comma-separated)"
        return f"list of {_type_name(item)} (comma-separated)"
    if annotation is bool:
        return "`true` / `false`"
    return {str: "string", int: "integer", float: "number"}.get(
        annotation, getattr(annotation, "__name__", str(annotation))
    )


def _default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, list):
        return "`" + ",".join(str(v) for v in value) + "`" if value else "empty"
    if value == "":
        return '`""`'
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def section_markdown(section: Section) -> str:
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for name, info in section.view.model_fields.items():
        key = section.prefix + (info.alias or name)
        if not info.description:
            raise ValueError(f"config key '{key}' ({section.view.__name__}.{name}) has no docstring")
        kind = ", ".join([_type_name(info.annotation), *_constraints(info)])
        rows.append(f"| `{key}` | {_cell(kind)} | {_cell(_default(info))} | {_cell(info.description)} |")
    return "\n".join([f"### {section.title}", "", section.intro, "", *rows, ""])


def _all_views() -> set[type[ConfigView]]:
    """Every view in the package: importing each ``config`` module finds views added later."""
    for module in pkgutil.walk_packages(millstream.__path__, "millstream."):
        if module.name.rsplit(".", 1)[-1] in ("config", "views"):
            importlib.import_module(module.name)
    found: set[type[ConfigView]] = set()
    pending = list(ConfigView.__subclasses__())
    while pending:
        view = pending.pop()
        if view.model_fields:  # a base of schemas (systems.base.SystemConfigView) declares no key of its own
            found.add(view)
        pending.extend(view.__subclasses__())
    return found


def reference_markdown() -> str:
    missing = sorted(view.__name__ for view in _all_views() - {section.view for section in SECTIONS})
    if missing:
        raise ValueError(f"config views missing from the reference (tools/docs/config_reference.py): {missing}")
    return "\n".join(section_markdown(section) for section in SECTIONS)


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs hook: fill in the marker of the configuration page."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its '{MARKER}' marker")
    return markdown.replace(MARKER, reference_markdown())
