"""Old module paths of the contracts, the embedded defaults and the connectors, kept for one release, each
import with a ``DeprecationWarning``.

When each top-level folder became one layer (issue 34), ``systems/``, ``metadata/``, ``blobstore/`` and
``metrics/`` were split by layer. Users name those modules in code (``millstream.metrics.registry``,
``millstream.systems.kinesis``) and in config (``systems.<s>.samza.factory``, ``metadata.store.factory``,
``blob.store.manager.factory``: ``millstream.systems.kafka.factory:KafkaSystemFactory``). Instead of a shim file
in folders that no longer exist, an import hook answers the old names: importing one imports the new module and
binds it under the old name too, so a class is the same object under either path (``isinstance`` and pickling
hold). ``millstream/__init__.py`` installs the hook, so any import of the package makes the old names work.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

MOVED: dict[str, str] = {
    "millstream.systems.base": "millstream.contracts.systems",
    "millstream.systems.startpoints": "millstream.contracts.startpoints",
    "millstream.systems.registry": "millstream.composition.systems",
    "millstream.systems.kafka": "millstream.connectors.kafka",
    "millstream.systems.kinesis": "millstream.connectors.kinesis",
    "millstream.systems.log": "millstream.embedded.log",
    "millstream.metadata.base": "millstream.contracts.metadata",
    "millstream.metadata.factory": "millstream.contracts.metadata_factory",
    "millstream.metadata.coordination": "millstream.contracts.coordination",
    "millstream.metadata.settings": "millstream.contracts.metadata_settings",
    "millstream.metadata.opening": "millstream.composition.metadata",
    "millstream.metadata.sqlite": "millstream.embedded.sqlite",
    "millstream.metadata.sqlite_lock": "millstream.embedded.sqlite_lock",
    "millstream.blobstore.base": "millstream.contracts.blobstore",
    "millstream.blobstore.settings": "millstream.contracts.blobstore_settings",
    "millstream.blobstore.local": "millstream.embedded.local_blobstore",
    "millstream.blobstore.s3": "millstream.connectors.s3",
    "millstream.blobstore.azure": "millstream.connectors.azure",
    "millstream.metrics.registry": "millstream.contracts.metrics",
    "millstream.metrics.snapshot": "millstream.contracts.metrics_snapshot",
    "millstream.metrics.settings": "millstream.contracts.metrics_settings",
}
"""Old module (or package) path -> new one. A moved package's modules follow it: ``millstream.systems.kafka.factory``
is ``millstream.connectors.kafka.factory``."""
EMPTIED = ("millstream.metadata", "millstream.blobstore")
"""The old packages nothing is left in: empty packages whose old modules the table answers, so
``from millstream.metadata import coordination`` keeps working."""


def new_name(old: str) -> str | None:
    """The module an old path now names, or None when ``old`` did not move."""
    if old in MOVED:
        return MOVED[old]
    package = old.rpartition(".")[0]
    while package:
        if package in MOVED:
            return f"{MOVED[package]}.{old[len(package) + 1 :]}"
        package = package.rpartition(".")[0]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module of its new one (the same object, bound under both names)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(
            f"{spec.name} moved to {self.new}; the old path stops working in the next release",
            DeprecationWarning,
            stacklevel=_caller_level(),
        )
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system set the old name's spec on the shared module


class _Emptied(importlib.abc.Loader):
    """Loads an old package nothing is left in as an empty package (its modules are answered one by one)."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = ModuleType(spec.name, f"Old path, kept for one release: see {__name__}.")
        module.__path__ = []
        return module

    def exec_module(self, module: ModuleType) -> None:
        pass


class _OldPaths(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith("millstream."):  # every import of the process asks: answer the others at once
            return None
        if fullname in EMPTIED:
            return importlib.machinery.ModuleSpec(fullname, _Emptied(), is_package=True)
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def _caller_level() -> int:
    """The stack level of the first frame outside the import system and this module, so the warning names
    the line that imported the old path (``warnings`` skips the import system's frozen frames itself)."""
    frame = sys._getframe(2)
    level = 2
    while frame.f_back is not None:
        name = frame.f_code.co_filename
        if not ("importlib" in name and "_bootstrap" in name):
            if frame.f_globals.get("__name__") not in (__name__, "importlib"):
                return level
            level += 1
        frame = frame.f_back
    return level


def install() -> None:
    """Answer the old paths from now on (idempotent)."""
    if not any(isinstance(finder, _OldPaths) for finder in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())
