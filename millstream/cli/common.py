"""What every ``millstream`` subcommand shares: config loading, consoles, and errors as exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from millstream.config import Config, parse_override
from millstream.coordinator.prepare import load_job_config
from millstream.errors import ConfigError, MillstreamError, StreamNotFoundError

# Never break names, paths or table cells across lines in a pipe, where rich would assume 80 columns.
_PIPE_WIDTH = None if sys.stdout.isatty() else 200
out = Console(soft_wrap=True, width=_PIPE_WIDTH)
err = Console(stderr=True, soft_wrap=True, width=_PIPE_WIDTH)

ConfigPath = Annotated[Path, typer.Argument(help="Job config: YAML or .properties", show_default=False)]
Overrides = Annotated[list[str] | None, typer.Option("--set", "-s", help="Override a config key: key=value")]

T = TypeVar("T")


def guarded(action: Callable[[], T], *, usage: bool = False) -> T:
    """Run ``action``; a millstream error becomes a one-line message and the documented exit code:
    2 for bad config, a missing stream, or (``usage``) any refused request; 1 otherwise."""
    try:
        return action()
    except (ConfigError, StreamNotFoundError) as error:
        err.print(f"[bold red]error:[/] {error}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    except MillstreamError as error:
        err.print(f"[bold red]error:[/] {error}", markup=True, highlight=False)
        raise typer.Exit(2 if usage else 1) from None


def load(config: Path, overrides: list[str] | None) -> Config:
    return guarded(lambda: load_job_config(config, dict(parse_override(o) for o in overrides or [])))
