"""Flat Samza-style configuration: string keys to string values.

Samza users know the flat keys (``task.commit.ms``, ``systems.<s>.samza.factory``), so they are the
wire format: a YAML file may nest them and is flattened by dots, a ``.properties`` file is read as is,
and ``--set key=value`` overrides either. Values stay strings here; typed views parse them
(``millstream.config.views``) so that every error can name the key at fault.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from millstream.config.secrets import REDACTED, is_secret_key, shown_value
from millstream.errors import ConfigError


class Config(Mapping[str, str]):
    """An immutable flat map of configuration, with the file it came from (for relative paths)."""

    __slots__ = ("_values", "source")

    def __init__(self, values: Mapping[str, Any] | None = None, source: str | None = None) -> None:
        self._values: dict[str, str] = {str(k): _to_text(str(k), v) for k, v in (values or {}).items()}
        self.source = source

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Config({self.redacted()!r})"

    def subset(self, prefix: str, strip_prefix: bool = True) -> dict[str, str]:
        """Every key starting with ``prefix``, without the prefix when ``strip_prefix``."""
        cut = len(prefix) if strip_prefix else 0
        return {k[cut:]: v for k, v in self._values.items() if k.startswith(prefix)}

    def with_overrides(self, overrides: Mapping[str, Any]) -> Config:
        merged = dict(self._values)
        merged.update({k: _to_text(k, v) for k, v in overrides.items()})
        return Config(merged, self.source)

    def without(self, *keys: str) -> Config:
        return Config({k: v for k, v in self._values.items() if k not in keys}, self.source)

    def to_dict(self) -> dict[str, str]:
        return dict(self._values)

    def redacted(self) -> dict[str, str]:
        """The config safe to print or log: secret values (``sensitive.*``, passed-through passwords) masked."""
        return {k: shown_value(k, v) for k, v in self._values.items()}

    def get_bool(self, key: str, default: bool) -> bool:
        raw = self._values.get(key)
        return default if raw is None else parse_bool(key, raw)

    def get_int(self, key: str, default: int) -> int:
        raw = self._values.get(key)
        return default if raw is None else parse_int(key, raw)

    def get_list(self, key: str) -> list[str]:
        raw = self._values.get(key, "")
        return [part.strip() for part in raw.split(",") if part.strip()]


def parse_bool(key: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off"):
        return False
    raise ConfigError(f"config key '{key}' must be true or false, got '{shown_value(key, raw)}'")


def parse_int(key: str, raw: str) -> int:
    try:
        return int(raw.strip())
    except ValueError:
        raise ConfigError(f"config key '{key}' must be an integer, got '{shown_value(key, raw)}'") from None


def _to_text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_to_text(key, item) for item in value)
    if value is None:
        return ""
    if isinstance(value, (dict, set)):
        raise ConfigError(f"config key '{key}' has a {type(value).__name__} value; expected a scalar or a list")
    return str(value)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten nested mappings by joining keys with dots: ``{task: {commit: {ms: 5}}}`` → ``task.commit.ms``."""
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        full = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{full}."))
        else:
            flat[full] = value
    return flat


def parse_properties(text: str, source: str) -> dict[str, str]:
    """Java-style ``.properties``: ``key=value`` or ``key: value``, ``#``/``!`` comments, ``\\`` continuation."""
    values: dict[str, str] = {}
    pending = ""
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and number < len(lines):
            pending = line[:-1]
            continue
        if line.endswith("\\"):
            line = line[:-1]
        for index, char in enumerate(line):
            if char in "=:":
                values[line[:index].strip()] = line[index + 1 :].strip()
                break
        else:
            shown = REDACTED if is_secret_key(line.split()[0]) else raw.strip()
            raise ConfigError(f"{source}:{number}: expected 'key=value', got '{shown}'")
    return values


def parse_override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set expects key=value, got '{shown_value(text.strip(), text)}'")
    return key.strip(), value.strip()


def _yaml_problem(error: yaml.YAMLError) -> str:
    """The YAML error without the quoted source line, which may hold a ``sensitive.`` value."""
    problem = getattr(error, "problem", None)
    mark = getattr(error, "problem_mark", None)
    if problem is None:
        return type(error).__name__
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    context = getattr(error, "context", None)
    return f"{context + ': ' if context else ''}{problem}{where}"


def load_config(path: str | os.PathLike[str] | None, overrides: Mapping[str, Any] | None = None) -> Config:
    """Read a YAML or ``.properties`` file and apply overrides; ``millstream.coordinator.prepare`` validates it.

    Relative filesystem paths in the config are resolved against the config file's directory, so a
    job behaves the same from any working directory and on Spark executors whose cwd differs.
    """
    values: dict[str, Any] = {}
    source = None
    if path is not None:
        file = Path(path)
        source = str(file.resolve())
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot read config file '{path}': {error.strerror or error}") from None
        if file.suffix in (".properties", ".props"):
            values = dict(parse_properties(text, str(path)))
        else:
            try:
                tree = yaml.safe_load(text) or {}
            except yaml.YAMLError as error:
                raise ConfigError(f"config file '{path}' is not valid YAML: {_yaml_problem(error)}") from None
            if not isinstance(tree, Mapping):
                raise ConfigError(f"config file '{path}' must hold a mapping of keys, not {type(tree).__name__}")
            values = flatten(tree)
    from millstream.config.views import resolve_paths

    return resolve_paths(Config(values, source).with_overrides(overrides or {}))
