"""Load user- or config-named classes: a built-in alias, ``package.module:Name`` or ``package.module.Name``."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from millstream.errors import ConfigError
from millstream.extras import install_hint


def load_object(name: str, key: str, aliases: Mapping[str, str] | None = None) -> Any:
    """Import what ``name`` designates; ``key`` is the config key it came from, for the error message."""
    target = (aliases or {}).get(name, name)
    module_name, sep, attribute = target.partition(":")
    if not sep:
        module_name, _, attribute = target.rpartition(".")
    if not module_name or not attribute:
        known = f" (built in: {', '.join(sorted(aliases))})" if aliases else ""
        raise ConfigError(f"config key '{key}': '{name}' is not a known name or a 'module:Class' path{known}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        hint = install_hint(error)
        if hint is not None:
            raise ConfigError(f"config key '{key}': '{name}' needs an optional dependency: {hint}") from None
        raise ConfigError(f"config key '{key}': cannot import '{module_name}' for '{name}': {error}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(f"config key '{key}': module '{module_name}' has no '{attribute}'") from None
